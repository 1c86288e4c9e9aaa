"""What the Library says about a run or a folder: its method, status, losses, checkpoints and the settings that
differ from the defaults, or a dataset's and model's size in words (no raw JSON dumps)."""

from __future__ import annotations

import contextlib
import html
from pathlib import Path

from PySide6.QtWidgets import QTreeWidgetItem

from desktop_app.engine.methods import METHOD_BY_KEY, method_of
from desktop_app.engine.model.families import family_words, works_here
from desktop_app.engine.run_folder import RUN_FILE, MetricsSummary, list_committed, read_json, tail_records
from desktop_app.engine.runs import is_live, nested_runs
from desktop_app.engine.specs import TrainSpec
from desktop_app.ui.widgets.run_view import run_method_key
from desktop_app.ui.widgets.sweep_library import SWEEPS_KIND, sweep_details_html

STATUS_WORDS = {"completed": "completed", "stopped": "stopped", "early_stopped": "stopped early", "failed": "failed",
                "cancelled": "cancelled"}


def _esc(text: str) -> str:
    return html.escape(text)


def run_status(run: Path, summary: MetricsSummary | None = None) -> str:
    """How a run stands, in words: completed, stopped, failed…, "training now" or "unfinished" (it never ended)."""
    summary = summary or MetricsSummary.of(tail_records(run))
    if summary.finished is not None:
        reason = str(summary.finished.get("reason", ""))
        return STATUS_WORDS.get(reason, reason.replace("_", " "))
    if is_live(run):
        return "training now"
    return "unfinished" if summary.last_step else "not started"


def is_adapter_run(run: Path) -> bool:
    config = read_json(run / RUN_FILE)
    adapter = config.get("adapter") if isinstance(config, dict) else None
    return isinstance(adapter, dict) and adapter.get("kind") in ("lora", "qlora")


def rows_html(rows: list[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><td style='color:#6b7280; padding-right:12px'>{_esc(k)}</td><td>{v}</td></tr>"
                    for k, v in rows if v)
    return f"<table cellspacing='2'>{cells}</table>"


def run_details_html(run: Path) -> str:
    """What a person asks of a run: its method and status, where it got to, its losses and checkpoints, what it
    started from and the settings that differ from the defaults (run.json has the rest)."""

    summary = MetricsSummary.of(tail_records(run))
    last, finished = summary.last_step, summary.finished
    key = run_method_key(run)
    status = run_status(run, summary)
    rows = [("Method", _esc(METHOD_BY_KEY[key].label) if key in METHOD_BY_KEY else ""),
            ("Status", f"<b>{_esc(status)}</b>" + (f" — {_esc(str(finished.get('message')))}"
                                                     if finished and finished.get("message") else ""))]
    if last:
        rows.append(("Progress", f"step {int(last.get('step', 0)):,} of {int(last.get('total_steps', 0)):,}"))
        if isinstance(last.get("loss"), (int, float)):
            rows.append(("Training loss", f"{last['loss']:.3f} (last)"))
        if isinstance(last.get("elapsed_s"), (int, float)) and last["elapsed_s"]:
            rows.append(("Trained for", f"{last['elapsed_s'] / 60:.1f} min"))
    if summary.best_val_loss is not None:
        rows.append(("Validation loss", f"{summary.best_val_loss:.3f} (best)"))
    committed = list_committed(run)
    rows.append(("Checkpoints", f"{len(committed)} checkpoint(s)" + (f"; newest: {_esc(committed[-1].name)}"
                                                                    if committed else "")))
    config = read_json(run / RUN_FILE)
    if isinstance(config, dict):
        if config.get("base_model"):
            rows.append(("Base model", _esc(str(config["base_model"]))))
        if config.get("dataset"):
            rows.append(("Dataset", _esc(str(config["dataset"]))))
        data = config.get("data") if isinstance(config.get("data"), list) else []
        if data:
            rows.append(("Data files", ", ".join(_esc(Path(str(d)).name) for d in data)))
        train = config.get("train") if isinstance(config.get("train"), dict) else {}
        defaults = TrainSpec().to_dict()
        changed = [f"{_esc(k)} {_esc(str(v))}" for k, v in train.items() if defaults.get(k, v) != v or k == "steps"]
        if changed:
            rows.append(("Settings", ", ".join(changed)))
        options = config.get("method_options") if isinstance(config.get("method_options"), dict) else {}
        if options:
            rows.append(("Method options", ", ".join(f"{_esc(k)} {_esc(str(v))}" for k, v in options.items())))
    if is_live(run):
        rows.insert(2, ("Live", "<b>● training now</b>, in a process of its own (Watch live follows it)"))
    return rows_html(rows)


def folder_details_html(path: Path) -> str:
    """A model, dataset, tokenizer or export in a few words (its files hold the rest)."""
    rows: list[tuple[str, str]] = []
    manifest = read_json(path / "manifest.json")
    if isinstance(manifest, dict) and isinstance(manifest.get("splits"), dict):
        for split, info in manifest["splits"].items():
            if isinstance(info, dict):
                rows.append((f"{split.capitalize()} split", f"{int(info.get('documents', 0)):,} documents, "
                             f"{int(info.get('tokens', 0)):,} tokens, {int(info.get('chunks', 0)):,} windows"))
        tokenizer = manifest.get("tokenizer") if isinstance(manifest.get("tokenizer"), dict) else {}
        rows.append(("Tokenizer", f"{_esc(str(tokenizer.get('kind', '')))}, {int(tokenizer.get('vocab_size', 0)):,}"
                                  " tokens"))
        chunking = manifest.get("chunking") if isinstance(manifest.get("chunking"), dict) else {}
        rows.append(("Windows", f"{chunking.get('context_length', '?')} tokens, overlap {chunking.get('overlap', 0)}"))
    config = read_json(path / "config.json")
    if isinstance(config, dict):
        model_type = str(config.get("model_type", "")) or None
        rows.append(("Model family", _esc(family_words(model_type))))
        rows.append(("Works here", _esc(works_here(model_type))))
        for key, words in (("hidden_size", "Hidden size"), ("n_embd", "Hidden size"), ("num_hidden_layers", "Layers"),
                           ("n_layer", "Layers"), ("vocab_size", "Vocabulary"),
                           ("max_position_embeddings", "Context"), ("n_positions", "Context")):
            if isinstance(config.get(key), int):
                rows.append((words, f"{config[key]:,}"))
    if path.is_dir():
        files = sorted(p.name for p in path.iterdir())[:12]
        rows.append(("Files", ", ".join(_esc(f) for f in files)))
    return rows_html(rows)


def folder_size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (links followed: a Hugging Face snapshot's files are links)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def size_text(n: float) -> str:
    """A size as the Library's Size column writes it (one decimal, decimal units)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def run_outcome(run: Path) -> str | None:
    """How the run's last session ended (completed, stopped, failed, ...), or None when it never ended (a crash)
    or has no metrics. Read from its metrics.jsonl, without loading the engine."""
    finished = MetricsSummary.of(tail_records(run)).finished
    return str(finished.get("reason", "")) if finished is not None else None


def resumable(run: Path) -> bool:
    """A run that Resume can continue: its run.json and at least one committed checkpoint are there."""
    return (run / RUN_FILE).is_file() and bool(list_committed(run))


def recorded_method(run: Path) -> str:
    """The method the run's run.json names (not guessed from its files)."""

    config = read_json(run / RUN_FILE)
    return method_of(config).key if isinstance(config, dict) else ""


def fill_sizes(items: list[QTreeWidgetItem], column: int, path_role: int) -> None:
    """The Library's Size column for `items` (the workspace's runs, datasets, models and exports), filled when the
    list is, not only once an item is selected (a few stat calls per folder: quick even for many runs)."""
    for item in items:
        path = item.data(0, path_role)
        if path:
            with contextlib.suppress(OSError):
                item.setText(column, size_text(folder_size(Path(path))))


def item_details_html(path: Path, kind: str) -> str:
    """The Library's details of one of the workspace's items: a run's (or a folder of runs'), else its folder's."""
    parts = [f"<h3>{html.escape(path.name)}</h3><p style='color:#6b7280'>{html.escape(str(path))}</p>"]
    inner = nested_runs(path) if kind == "runs" else []
    if inner:
        parts.append(f"<p>A folder of {len(inner)} runs: " + ", ".join(
            f"<b>{html.escape(r.name)}</b>" for r in inner) + ". Its actions use the newest run that has what they "
            "need; select a run below it to act on that one.</p>")
        parts.append(f"<p>{sum(len(list_committed(r)) for r in inner)} checkpoint(s) in its runs</p>")
    elif kind == SWEEPS_KIND:  # a settings search: what it searched, its best trial
        parts.append(sweep_details_html(path))
    else:
        parts.append(run_details_html(path) if kind == "runs" else folder_details_html(path))
    return "".join(parts)
