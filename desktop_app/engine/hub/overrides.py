"""One of huggingface_hub's module constants set for as long as any of the app's calls needs it (stdlib only).

huggingface_hub reads settings such as HF_HUB_OFFLINE and its download chunk size once, into module constants; the
app changes them only around its own calls. Calls overlap (several downloads, a search while one runs), so the
first to enter saves the value and the last to leave puts it back; threads share one count.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from typing import Any


class SharedOverride:
    """`module.attribute` set to `value` while at least one `with override():` block runs."""

    def __init__(self, module: str, attribute: str, value: Any) -> None:
        self.module, self.attribute, self.value = module, attribute, value
        self.lock = threading.Lock()
        self.users = 0
        self.saved: Any = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        target = importlib.import_module(self.module)
        with self.lock:
            if self.users == 0:
                self.saved = getattr(target, self.attribute)
                setattr(target, self.attribute, self.value)
            self.users += 1
        try:
            yield
        finally:
            with self.lock:
                self.users -= 1
                if self.users == 0:
                    setattr(target, self.attribute, self.saved)
                    self.saved = None
