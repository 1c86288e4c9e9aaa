"""What to measure when nobody says (torch-free, no weights read): the measure that fits the model.

    a language model  (a pretraining run, or a base without a chat template of its own)
                      -> perplexity and bits per byte on its own validation data: the run's prepared dataset's
                         validation split (a base of someone else's has none: text files must be given)
    a self-play model (a run whose method is self-play, or GRPO on a task world's tasks)
                      -> the held-out tasks of its task world, of the types it played
    a chat model      (a fine-tuning run, or a base with a chat template of its own)
                      -> the questions of a question file when one is given (matched by *contains*: a chat reply
                         wraps its answer in a sentence), else the held-out tasks of the task world it would play

The `eval` verb uses these when no evaluation is named; the window's Evaluate view fills its form with them when a
model is ticked (and again when the ticked models change, in the fields the person has not changed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import TASK_TYPES, WORLDS
from desktop_app.engine.model.folders import folder_chat_template
from desktop_app.engine.model.gguf_file import is_gguf_file, read_header
from desktop_app.engine.model.hub_cache import cache_repo_of, resolve_model_reference
from desktop_app.engine.run_folder import CHECKPOINTS_DIR, RUN_FILE, read_json

MODEL_KINDS = ("language", "selfplay", "chat")
KIND_WORDS = {"language": "a language model", "selfplay": "a self-play model", "chat": "a chat model"}


@dataclass(frozen=True)
class ModelMeasures:
    """One model's kind and what fits it: the EvalSpec fields to use (world, task_types, text, qa_match) and, in
    words, why (and what is missing)."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _task_world(files: list[Any]) -> str | None:
    """The task world whose tasks a GRPO run's prompt files hold (as the `tasks` verb writes them: records with
    "world", "type" and "program"), or None for prompts of any other kind."""
    for name in files:
        try:
            with open(Path(str(name)).expanduser(), encoding="utf-8-sig") as fh:
                line = next((x for x in fh if x.strip()), "")
            record = json.loads(line) if line else None
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(record, dict) and record.get("world") in WORLDS and record.get("type") in TASK_TYPES \
                and isinstance(record.get("program"), str):
            return str(record["world"])
    return None


def _has_own_chat_template(path: Path) -> bool:
    """A base that brings a chat template of its own (an instruct model); the template every tokenizer trained
    here gets is no sign that the model can hold a conversation."""
    from desktop_app.engine.data.tokenization import CHAT_TEMPLATE  # lazy: tokenizers

    if path.is_file():
        try:
            return is_gguf_file(path) and bool(read_header(path).chat_template)
        except (OSError, UserError):
            return False
    template = folder_chat_template(path)
    return bool(template) and template != CHAT_TEMPLATE.strip()


def validation_text(dataset: str) -> tuple[list[str], str]:
    """([the dataset], "") when a prepared dataset with a validation split is there to score, else ([], why not)."""
    if not dataset:
        return [], "it names no dataset"
    folder = Path(dataset).expanduser()
    manifest = read_json(folder / "manifest.json")
    if not isinstance(manifest, dict):
        return [], f"its dataset {folder} is no longer there (no manifest.json)"
    splits = manifest.get("splits")
    val = splits.get("val") if isinstance(splits, dict) else None
    tokens = val.get("tokens") if isinstance(val, dict) else None
    if not isinstance(tokens, int):  # an older manifest: the stream's size tells
        tokens = (folder / "val.bin").stat().st_size if (folder / "val.bin").is_file() else 0
    if not tokens:
        return [], f"its dataset {folder.name} has no validation split (its training text would flatter it)"
    if not (folder / "tokenizer.json").is_file():
        return [], f"its dataset {folder.name} has no tokenizer.json to read its validation text back with"
    return [str(folder)], ""


def _run_measures(run: dict[str, Any], name: str) -> ModelMeasures:
    """What fits a run of ours (or one of its checkpoints), by the method it trained with."""
    objective = str(run.get("objective", "causal_lm"))
    options = run.get("method_options") if isinstance(run.get("method_options"), dict) else {}
    if objective == "selfplay":
        world = options.get("world", "auto")
        played = options.get("task_types")
        types = [t for t in played if t in TASK_TYPES] if isinstance(played, list) else []
        types = types or list(TASK_TYPES)
        return ModelMeasures("selfplay", {"world": world if world in ("auto", *WORLDS) else "auto",
                                          "task_types": types},
                             f"{name} is a self-play model: the held-out tasks of its task world ({world})")
    if objective == "grpo":
        files = [f for key, where in (("data", run), ("prompts", options)) if isinstance(where.get(key), list)
                 for f in where[key]]
        world = _task_world(files)
        if world is not None:
            return ModelMeasures("selfplay", {"world": world},
                                 f"{name} practised {world} tasks (GRPO): the held-out tasks of that world")
        return ModelMeasures("chat", {}, f"{name} is a chat model (GRPO on prompts)")
    if objective in ("sft", "dpo"):
        return ModelMeasures("chat", {}, f"{name} is a chat model (fine-tuned with {objective.upper()})")
    text, why = validation_text(str(run.get("dataset") or ""))
    note = f"{name} is a language model (pretraining): perplexity and bits per byte on " + (
        "its dataset's validation split" if text else f"text you give ({why})")
    return ModelMeasures("language", {"text": text}, note)


def model_measures(path: str | Path) -> ModelMeasures:
    """The kind of the model at `path` (a run, checkpoint, export, Hugging Face folder or GGUF file) and what fits
    it, read from its run.json and tokenizer files; a Hub id pulled earlier from its copy in the Hugging Face cache.
    UserError when the path does not exist (for a Hub id: with the pull command)."""
    p = resolve_model_reference(str(path))
    if not p.exists():
        raise UserError(f"{p} does not exist")
    run = read_json(p / RUN_FILE) if p.is_dir() else None  # a run, or one of its checkpoints
    if isinstance(run, dict):
        in_run = p.parent.name == CHECKPOINTS_DIR  # a checkpoint: named with its run
        return _run_measures(run, f"{p.parent.parent.name} {p.name}" if in_run else p.name)
    name = (cache_repo_of(p) if p.is_dir() else "") or p.name  # a Hub snapshot by its repository, not its commit
    if _has_own_chat_template(p):
        return ModelMeasures("chat", {}, f"{name} is a chat model (it brings its own chat template)")
    return ModelMeasures("language", {"text": []}, f"{name} is a language model: perplexity and bits per byte "
                         "on text you give (it has no validation data of its own)")


def default_measures(models: list[str], *, qa: str = "") -> ModelMeasures:
    """The EvalSpec fields that fit these models together (every model meets the same measures, so their figures
    form one table): a self-play model's world, the language models' validation text, questions for chat models
    when a question file (`qa`) is given, else a chat model's task world; contains-match when any is a chat model.
    kind: the one kind of them all, "mixed", or "none" for no model."""
    found = [model_measures(m) for m in models]
    kinds = {m.kind for m in found}
    worlds = [m.fields["world"] for m in found if m.kind == "selfplay"]
    types = next((m.fields["task_types"] for m in found if "task_types" in m.fields), list(TASK_TYPES))
    text: list[str] = []
    for m in found:
        text += [t for t in m.fields.get("text", []) if t not in text]
    chat = "chat" in kinds
    world = worlds[0] if worlds else "auto" if chat and not qa else "none"
    notes = [m.note for m in found]
    if chat and qa:
        notes.append("the questions of the question file; an answer counts when the reply contains the expected "
                     "one (contains match)")
    elif chat:
        notes.append("without a question file, the held-out tasks of the task world it would play; give one to ask "
                     "it questions (an answer counts when the reply contains the expected one)")
    fields = {"world": world, "task_types": list(types), "text": text, "qa_match": "contains" if chat else "exact"}
    kind = kinds.pop() if len(kinds) == 1 else "mixed" if kinds else "none"
    return ModelMeasures(kind, fields, "; ".join(notes))


def fields_to_refill(shown: dict[str, Any], filled: dict[str, Any], fitting: dict[str, Any]) -> dict[str, Any]:
    """The fitting values of the fields a person has not changed: those still showing what was last filled in
    (`filled`; a field never filled counts as unchanged). A form's defaults follow its model this way without
    undoing a person's choice."""
    return {k: v for k, v in fitting.items() if k not in filled or shown.get(k) == filled[k]}
