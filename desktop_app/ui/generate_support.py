"""What the Generate tab stands on besides its widgets: the job that streams a generation (in the worker thread), the
model it loaded last (kept for the next generation), which mode a model opens in, and how a reply ended, in words."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.events import Controls
from desktop_app.engine.model.gguf_file import is_gguf_file
from desktop_app.engine.run_folder import RUN_FILE
from desktop_app.engine.specs import GenerateSpec
from desktop_app.ui.widgets.run_view import run_method_key


class ModelCache:
    """The last loaded model, reused across generations (loading is the slow part). Worker-thread only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.path: str | None = None
        self.loaded: Any = None

    def get(self, path: str) -> Any:
        from desktop_app.engine.model.folders import resolve_model_folder  # lazy: start-up
        from desktop_app.engine.model.loading import load_model  # lazy: start-up

        # Keyed on the folder a path resolves to: a run's "newest checkpoint" moves on while it trains.
        folder = str(resolve_model_folder(path)[0])
        with self._lock:
            if self.path != folder or self.loaded is None:
                self.loaded = None  # free the old one first
                self.loaded = load_model(folder)
                self.path = folder
            return self.loaded

    def clear(self) -> None:
        with self._lock:
            self.path, self.loaded = None, None


def finish_words(reason: str, max_new_tokens: int) -> str:
    """How a reply ended, in words ("eos" is jargon)."""
    return {"eos": "the model ended it", "stop": "a stop text ended it",
            "length": f"cut at the longest reply ({max_new_tokens:,} tokens)",
            "cancelled": "stopped by you"}.get(reason, reason)


def opens_in_chat(path: str | Path) -> bool:
    """Chat for a model that was taught to chat: a fine-tuning run's (SFT, LoRA, DPO, GRPO) or a model whose tokenizer
    has a chat template of its own. A pretrained or self-played model of ours completes text: the template every
    tokenizer trained here gets is no sign that the model can hold a conversation."""
    from desktop_app.engine.data.tokenization import CHAT_TEMPLATE  # lazy: tokenizers
    from desktop_app.engine.model.folders import folder_chat_template, gguf_chat_template  # lazy: start-up

    if (Path(path) / RUN_FILE).is_file():  # a run of ours, or one of its checkpoints
        return run_method_key(path) not in ("pretraining", "selfplay")
    # a GGUF file (an export, Ollama's, LM Studio's): the template in its metadata; a model folder: its tokenizer's
    template = gguf_chat_template(path) if is_gguf_file(path) else folder_chat_template(path)
    return bool(template) and template.strip() != CHAT_TEMPLATE.strip()


def generate_job(cache: ModelCache, paths: list[str], prompt: str | list[dict[str, str]], spec: GenerateSpec,
                 controls: Controls) -> Iterator[tuple[Any, ...]]:
    """Stream `prompt` (a text, or a chat conversation: a list of {"role", "content"} messages) from each model."""
    from desktop_app.engine.generate.decode import stream_text  # lazy: torch
    from desktop_app.engine.generate.prompts import context_length, fit_messages  # lazy: start-up

    for column, path in enumerate(paths):
        if controls.stop.is_set():
            break
        yield ("loading", column, path)
        loaded = cache.get(path)
        yield ("loaded", column, path)
        source: Any = prompt
        if not isinstance(prompt, str):
            # A conversation: drop its oldest turns rather than cut the system prompt (the engine's policy).
            kept, dropped = fit_messages(loaded.tokenizer, prompt, context_length(loaded.model),
                                         reply_tokens=spec.max_new_tokens)
            if dropped:
                yield ("trimmed", column, dropped)
            source = [kept]  # stream_text takes a list of prompts: here one conversation
        for event in stream_text(loaded, source, spec, stop_event=controls.stop):
            yield (column, event)
