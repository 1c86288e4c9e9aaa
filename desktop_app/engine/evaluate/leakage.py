"""Which programs a model was trained on, read from its run's own records, so that `eval` can say how many of its
held-out programs a run has seen (0 when the held-out protocol held; tasks/heldout_protocol.py).

The records of a run: the task buffers of the checkpoint evaluated, the tasks its self-play log says entered
training and the proposals the proposer's updates took (self-play, solver-only RL), the text of its prepared dataset
(pretraining), its data files (fine-tuning, GRPO prompts), and the same of every run its base model came from.
Programs are found in text by `programs_in_text` (code blocks, mini lambdas) and compared by `program_key`.
Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.run_folder import parse_record
from desktop_app.engine.tasks.base import Task
from desktop_app.engine.tasks.heldout_protocol import program_key, programs_in_text

SELFPLAY_LOG = "selfplay.jsonl"  # objectives/selfplay.LOG_NAME (that module loads torch)
# Proposals that entered a buffer: solver tasks. A duplicate never does (a repeat of a task already there, or since the
# duplicate rule a program the run has seen, held-out ones included, which is not even solved); a held-out proposal
# is neither solved nor in any update.
TRAINED_VERDICTS = ("valid",)
MAX_DATASET_TOKENS = 20_000_000  # larger datasets are not decoded for the scan (said in `skipped`)
MAX_FILE_BYTES = 200_000_000
MAX_BASES = 8  # runs followed back through their base models


@dataclass
class TrainingPrograms:
    """Program keys found in a run's training records, by where they were found, and what could not be read."""

    sources: dict[str, set[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def add(self, source: str, keys: set[str]) -> None:
        self.sources.setdefault(source, set()).update(keys)

    @property
    def keys(self) -> set[str]:
        return set().union(*self.sources.values()) if self.sources else set()

    def count(self, tasks: list[Task]) -> int:
        """How many of these tasks' distinct programs the records hold."""
        return len({program_key(t.program) for t in tasks} & self.keys)


def buffer_programs(state: dict[str, Any]) -> set[str]:
    """The programs in a checkpoint's self-play buffers (trainer_state.json's data position)."""
    data = state.get("data")
    buffers = data.get("buffers") if isinstance(data, dict) else None
    if not isinstance(buffers, dict):
        return set()
    return {program_key(str(task.get("program", ""))) for buffer in buffers.values() if isinstance(buffer, dict)
            for task in buffer.get("tasks", []) if isinstance(task, dict)}


def logged_programs(run_dir: Path) -> set[str]:
    """The programs of proposals the self-play log says entered training: the solver's tasks, and every program in
    a proposal text the proposer's update took (all but the held-out ones, whatever their reward)."""
    found = set()
    for entry in _log_lines(run_dir / SELFPLAY_LOG):
        proposals = entry.get("proposals") or []
        found |= {program_key(str(p.get("program", ""))) for p in proposals
                  if isinstance(p, dict) and p.get("verdict") in TRAINED_VERDICTS}
        for rollout in entry.get("rollouts") or []:
            if isinstance(rollout, dict) and rollout.get("role") == "proposer" and rollout.get("verdict") != "held-out":
                found |= programs_in_text(str(rollout.get("answer", "")))
    return found


def _log_lines(path: Path) -> list[dict[str, Any]]:
    """The self-play log's rounds (a torn or damaged line skipped, as metrics.jsonl's are)."""
    if not path.is_file():
        return []
    return [r for r in map(parse_record, path.read_text(encoding="utf-8", errors="replace").splitlines()) if r]


def dataset_programs(folder: Path, found: TrainingPrograms) -> None:
    """The programs in a prepared dataset's text (every split: validation documents were read in training too)."""
    from desktop_app.engine.data.token_store import TokenStore  # lazy: numpy
    from desktop_app.engine.data.tokenization import load_tokenizer  # lazy: tokenizers

    if not folder.is_dir():
        found.skipped.append(f"dataset {folder}: not found")
        return
    store = TokenStore(folder)
    if not store.tokenizer_path.is_file():
        found.skipped.append(f"dataset {folder.name}: no tokenizer.json to read its text")
        return
    tokenizer = load_tokenizer(store.tokenizer_path)
    for split in ("train", "val"):
        tokens = store.tokens(split)
        if len(tokens) > MAX_DATASET_TOKENS:
            found.skipped.append(f"dataset {folder.name} ({split}): {len(tokens):,} tokens, too many to scan")
            continue
        found.add(f"dataset {folder.name}", programs_in_text(_documents_text(tokens, store.doc_lengths(split),
                                                                             tokenizer)))


def _documents_text(tokens: Any, lengths: Any, tokenizer: Any) -> str:
    """A split's documents decoded one by one, a line break between them (documents are joined by EOS, not by a
    line break: decoded whole, a program could run on into the next document's first line)."""
    lengths = [int(n) for n in lengths] or [len(tokens)]
    texts, start = [], 0
    for length in lengths:
        texts.append(tokenizer.decode([int(t) for t in tokens[start:start + length]], skip_special_tokens=True))
        start += length
    return "\n".join(texts)


def file_programs(path: Path, found: TrainingPrograms) -> None:
    """The programs in a data file's text (JSONL records included: they are scanned as text)."""
    if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
        found.skipped.append(f"{path.name}: not found or too large to scan")
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    keys = programs_in_text(text.replace("\\n", "\n"))  # JSON strings hold their line breaks escaped
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("program"), str):  # a `tasks` file
            keys.add(program_key(record["program"]))
    found.add(path.name, keys)


def _run_of(model: Path) -> tuple[Path, Path | None] | None:
    """(run folder, checkpoint) of a run or checkpoint path, else None."""
    if run_folder.is_checkpoint_folder(model) and model.parent.name == run_folder.CHECKPOINTS_DIR:
        return model.parent.parent, model
    if run_folder.is_run_folder(model):
        return model, run_folder.latest_checkpoint(model, verify=False)
    return None


def training_programs(model: str | Path) -> TrainingPrograms | None:
    """The programs in the training records of a run or checkpoint and of the runs its base came from; None for a
    model with no run (an export, a Hugging Face folder: nothing is known of its training)."""
    found = TrainingPrograms()
    place, seen = _run_of(Path(model).expanduser()), 0
    if place is None:
        return None
    while place is not None and seen < MAX_BASES:
        run_dir, checkpoint = place
        seen += 1
        config = run_folder.read_json(run_dir / run_folder.RUN_FILE) or {}
        if checkpoint is not None:
            found.add(f"{run_dir.name} buffers", buffer_programs(run_folder.trainer_state(checkpoint)))
        found.add(f"{run_dir.name} self-play log", logged_programs(run_dir))
        if config.get("dataset"):
            dataset_programs(Path(config["dataset"]), found)
        for data in config.get("data") or []:
            file_programs(Path(data), found)
        base = str(config.get("base_model") or "")
        place = _run_of(Path(base)) if base and Path(base).exists() else None
    return found
