"""Whether the app may use the network, and the one door through which it talks to the Hugging Face Hub.

Rules (issue 37: offline by default, explicit online):
- Nothing here runs at import or at start-up. The network is touched only when the person opens the Get-a-model
  view, or runs `models search/pull` or `train --allow-download`: those call into engine.hub, which calls
  `require_network()` first.
- The person's switch: "network_features" in network.json in platformdirs.user_config_dir("AZR Model Trainer")
  (default on), and AZR_NETWORK=off in the environment, which wins over the setting. Either one off: NetworkOff,
  before any request is made.
- huggingface_hub reads HF_HUB_OFFLINE once, at import, into a module constant that blocks every request. The app
  runs offline-first (its test suite and some launchers set HF_HUB_OFFLINE=1 so that transformers never looks
  online), so `online()` lifts that constant while one of engine.hub's own calls runs, and only when the app's
  setting allows the network; it is restored when the last such call ends. Loading models stays offline.
- The endpoint is HF_ENDPOINT read at call time (tests point it at a local server), else huggingface_hub's default.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.hub.errors import NetworkOff
from desktop_app.engine.hub.overrides import SharedOverride

APP_NAME = "AZR Model Trainer"
SETTING = "network_features"
ENV_SWITCH = "AZR_NETWORK"
_OFF_WORDS = ("off", "0", "false", "no")

_LIFTED = SharedOverride("huggingface_hub.constants", "HF_HUB_OFFLINE", False)


def settings_file() -> Path:
    """Where the app's network setting lives (the user's config folder, not a workspace)."""
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP_NAME)) / "network.json"


def _read_settings() -> dict[str, Any]:
    try:
        data = json.loads(settings_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def off_by_environment() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() in _OFF_WORDS


def network_allowed() -> bool:
    """The person's choice: the setting (default on), unless AZR_NETWORK=off forbids the network."""
    return not off_by_environment() and bool(_read_settings().get(SETTING, True))


def set_network_allowed(allowed: bool) -> None:
    """Remember the setting (other keys of the file are kept)."""
    data = _read_settings()
    data[SETTING] = bool(allowed)
    settings_file().parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(settings_file(), json.dumps(data, indent=2) + "\n")


def require_network() -> None:
    """NetworkOff (saying which switch is off) unless the network is allowed."""
    if off_by_environment():
        raise NetworkOff(by_environment=True)
    if not bool(_read_settings().get(SETTING, True)):
        raise NetworkOff(by_environment=False)


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_api() -> Any:
    """A huggingface_hub.HfApi on the endpoint of now (require_network first). Call it inside `online()` where
    HF_HUB_OFFLINE may be set."""
    from huggingface_hub import HfApi

    require_network()
    return HfApi(endpoint=hub_endpoint())


@contextlib.contextmanager
def online() -> Iterator[None]:
    """Run one of engine.hub's calls with huggingface_hub's offline constant lifted (see the module docstring)."""
    require_network()
    with _LIFTED():
        yield
