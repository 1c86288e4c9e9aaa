"""Export a model as a Hugging Face folder, a zip of that folder, or a GGUF file with its Ollama Modelfile.

`export_model` is a generator of events (Progress, Log, then Finished) like every long job, so the
UI runs it in the background and the CLI prints a progress line. The output appears atomically: it
is built in a hidden temporary sibling and renamed into place at the end, so a failure or cancel
never leaves half an export, and an existing output is replaced only when asked (and only once the
new one is complete).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Finished, Log, Progress
from desktop_app.engine.export.gguf_quantize import (
    GGUF_TYPES,
    INSTALL_HINT,
    LLAMA_CPP_TYPES,
    llama_cpp_available,
    quantize,
)
from desktop_app.engine.export.gguf_tokenizer import (
    GGUFTokenizer,
    added_around_text,
    read_tokenizer_json,
    tokenizer_metadata,
)
from desktop_app.engine.export.modelfile import modelfile_text
from desktop_app.engine.export.space import check_export_space
from desktop_app.engine.fault_report import said_as_faults
from desktop_app.engine.fileio import fsync_dir
from desktop_app.engine.model.architecture import spec_from_hf_config
from desktop_app.engine.model.families import family_of, no_gguf_reason
from desktop_app.engine.model.folders import adapter_base_path, is_adapter_folder, resolve_base, resolve_model_folder
from desktop_app.engine.model.gguf_file import is_gguf_file, model_type_of, read_header
from desktop_app.engine.model.loading import load_model
from desktop_app.engine.os_faults import check_writable
from desktop_app.engine.run_folder import METRICS_FILE, MetricsSummary, read_json, read_metrics

FORMATS = ("hf", "zip", "gguf")
# f32 ... q8_0 written by us (export/gguf.py); the k-quants by llama.cpp's quantizer (export/gguf_quantize.py)
DEFAULT_MAX_SHARD_SIZE = "2GB"


# --- finding and loading the source --------------------------------------------------------------------

def resolve_source(source: str | Path) -> Path:
    """The model folder to export: the folder itself, or a run folder's newest verified checkpoint."""

    return resolve_model_folder(source)[0]


def _load(path: Path) -> tuple[Any, Any]:
    """(model in fp32 on CPU, transformers tokenizer) of a model folder (same rules as generation)."""
    import torch


    loaded = load_model(path, device="cpu", dtype=torch.float32)
    return loaded.model.eval(), loaded.tokenizer


def gguf_problem(source: str | Path) -> str | None:
    """Why `source` cannot be exported as GGUF (a sentence for the UI to show next to a disabled option),
    or None when it can. Cheap: reads configs and tokenizer.json only, loads no weights."""
    from desktop_app.engine.export.gguf_families import family_of  # lazy: numpy

    try:
        folder = resolve_source(source)
        if gguf_origin(folder) is not None:
            return None  # a GGUF, or a model made from one: its own tokenizer metadata is carried over
        config = _source_config(folder)
        family_of(config)
        if not (folder / "tokenizer.json").is_file():
            return f"{folder} has no tokenizer.json"
        tokenizer_metadata(read_tokenizer_json(folder / "tokenizer.json"), int(config.get("vocab_size") or 0), {})
    except UserError as exc:
        return str(exc)
    return None


def gguf_origin(folder: Path) -> Path | None:
    """The GGUF file a model's weights came from: the file itself, or (following run.json's base_model, and an
    adapter's base, up a chain of fine-tunes) the GGUF its first base was. None when it was not made from one."""

    current: Path | None = folder
    for _ in range(8):
        if current is None:
            return None
        if is_gguf_file(current):
            return current
        base: str | None = None
        if is_adapter_folder(current):
            base = adapter_base_path(current)
        else:
            run_dir = current.parent.parent if current.parent.name == "checkpoints" else current
            run = read_json(current / "run.json") or read_json(run_dir / "run.json")
            if isinstance(run, dict) and isinstance(run.get("base_model"), str):
                base = run["base_model"]
        if not base or not Path(base).expanduser().exists():
            return None
        current = resolve_source(base)
    return None


def _source_model_type(folder: Path) -> str:
    """The model_type of what `folder` (a model folder, adapter or GGUF file) holds, without loading weights."""

    if is_gguf_file(folder):
        return model_type_of(read_header(folder))

    if is_adapter_folder(folder):
        base = resolve_base(folder).adapter_base
        while base is not None and base.adapter_base is not None:
            base = base.adapter_base
        if base is not None:
            return base.model_type
    config = _source_config(folder)
    if not config:
        raise UserError(f"{folder} has no config.json: not a model folder (expected a run, checkpoint, export, "
                        "Hugging Face folder or GGUF file)")
    return str(config.get("model_type"))


def _source_config(folder: Path) -> dict[str, Any]:
    """config.json of a model folder; for an adapter folder (LoRA run), its base's."""

    if is_adapter_folder(folder):
        info = resolve_base(folder)
        base = info.adapter_base
        while base is not None and base.adapter_base is not None:
            base = base.adapter_base
        if base is not None and base.folder.is_dir():
            return read_json(base.folder / "config.json") or {}
    if not folder.is_dir():
        return {}
    return read_json(folder / "config.json") or {}


# --- model card ----------------------------------------------------------------------------------------

def _run_info(source: Path) -> dict[str, Any]:
    """What the run that made this checkpoint knew: run config, step, final metrics, dataset summary."""
    info: dict[str, Any] = {}
    run_dir = source.parent.parent if source.parent.name == "checkpoints" else None
    run = read_json(source / "run.json") or (read_json(run_dir / "run.json") if run_dir else None)
    if isinstance(run, dict):
        info["run"] = run
    state = read_json(source / "trainer_state.json")
    if isinstance(state, dict) and isinstance(state.get("step"), int):
        info["step"] = state["step"]
    if run_dir is not None and (run_dir / METRICS_FILE).is_file():
        summary = MetricsSummary.of(read_metrics(run_dir))
        info["last_step"], info["last_eval"] = summary.last_step, summary.last_eval
    dataset = info.get("run", {}).get("dataset") if isinstance(info.get("run"), dict) else None
    if dataset:
        manifest = read_json(Path(dataset) / "manifest.json")
        if isinstance(manifest, dict):
            info["dataset"] = {"path": dataset, "manifest": manifest}
    return info


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def model_card(name: str, spec: Any, params: int, info: dict[str, Any]) -> str:
    """A README.md model card: architecture, data and final metrics when the run recorded them."""
    family = getattr(spec, "family", "llama")
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        f"tags: [azr-model-trainer, {family}, text-generation]",
        "---",
        "",
        f"# {name}",
        "",
        f"A {params / 1e6:.2f}M-parameter {family}-family causal language model trained with AZR Model Trainer.",
        "",
        "## Architecture",
        "",
        "| setting | value |",
        "|---|---|",
        f"| parameters | {params:,} |",
    ]
    if spec is not None:
        for key, value in spec.to_dict().items():
            lines.append(f"| {key} | {_fmt(value)} |")
    lines.append("")
    lines += _data_section(info.get("dataset"))
    lines += _training_section(info)
    lines += [
        "## Usage",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{name}")',
        f'model = AutoModelForCausalLM.from_pretrained("{name}")',
        'ids = tokenizer("Once upon a time", return_tensors="pt").input_ids',
        "print(tokenizer.decode(model.generate(ids, max_new_tokens=50)[0]))",
        "```",
        "",
    ]
    return "\n".join(lines)


def _data_section(dataset: dict[str, Any] | None) -> list[str]:
    """The card's "Training data": the dataset's splits, tokenizer and number of source files."""
    if not dataset:
        return []
    manifest = dataset["manifest"]
    lines = ["## Training data", "", f"Dataset: `{Path(dataset['path']).name}`", ""]
    splits = manifest.get("splits") if isinstance(manifest.get("splits"), dict) else {}
    for split in ("train", "val"):
        s = splits.get(split)
        if isinstance(s, dict):
            parts = [f"{s[k]:,} {k}" for k in ("documents", "tokens") if isinstance(s.get(k), int)]
            if parts:
                lines.append(f"- {split}: {', '.join(parts)}")
    tok = manifest.get("tokenizer")
    if isinstance(tok, dict):
        desc = ", ".join(f"{k} {tok[k]}" for k in ("kind", "vocab_size") if k in tok)
        if desc:
            lines.append(f"- tokenizer: {desc}")
    sources = manifest.get("sources")
    if isinstance(sources, list):
        lines.append(f"- source files: {len(sources)}")
    lines.append("")
    return lines


def _training_section(info: dict[str, Any]) -> list[str]:
    """The card's "Training": steps, the main settings, the method (fine-tunes) and the final metrics."""
    run = info.get("run")
    if not (isinstance(run, dict) or info.get("last_step") or info.get("last_eval")):
        return []
    lines = ["## Training", ""]
    if "step" in info:
        lines.append(f"- steps trained: {info['step']:,}")
    train = run.get("train") if isinstance(run, dict) else None
    if isinstance(train, dict):
        for key in ("batch_size", "lr", "schedule", "weight_decay", "precision"):
            if key in train:
                lines.append(f"- {key}: {_fmt(train[key])}")
    if isinstance(run, dict) and "seed" in run:
        lines.append(f"- seed: {run['seed']}")
    if isinstance(run, dict) and run.get("objective", "causal_lm") != "causal_lm":
        lines += _method_lines(run)
    skip = {"type", "step", "total_steps", "elapsed_s", "eta_s"}
    for title, event in (("final training metrics", info.get("last_step")),
                         ("final validation metrics", info.get("last_eval"))):
        if event:
            metrics = ", ".join(f"{k} {_fmt(v)}" for k, v in event.items()
                                if k not in skip and isinstance(v, (int, float)))
            lines.append(f"- {title} (step {event.get('step')}): {metrics}")
    lines.append("")
    return lines


def _method_lines(run: dict[str, Any]) -> list[str]:
    """A fine-tune's method (and adapter), base model and data files."""
    adapter = run.get("adapter") if isinstance(run.get("adapter"), dict) else {}
    kind = adapter.get("kind", "none")
    lines = [f"- method: {run['objective']}"
             + (f" with {kind} (rank {adapter.get('rank', 8)}, merged into the base)" if kind != "none"
                else " (full fine-tuning)")]
    if run.get("base_model"):
        lines.append(f"- base model: `{Path(run['base_model']).name}`")
    for d in run.get("data", []) if isinstance(run.get("data"), list) else []:
        lines.append(f"- data: `{Path(d).name}`")
    return lines


# --- writers -------------------------------------------------------------------------------------------

def _special_ids(tokenizer: Any) -> dict[str, int | None]:
    return {role: getattr(tokenizer, f"{role}_token_id", None) for role in ("bos", "eos", "pad", "unk")}


def _write_hf(model: Any, tokenizer: Any, source: Path, folder: Path, max_shard_size: str | int,
              name: str) -> Iterator[Event]:
    from transformers import GenerationConfig

    from desktop_app.engine.data.tokenization import save_hf_tokenizer  # lazy: tokenizers

    folder.mkdir(parents=True)
    ids = _special_ids(tokenizer)
    # The config's token ids must agree with the tokenizer, or generate() stops on the wrong token.
    for role in ("bos", "eos", "pad"):
        if ids[role] is not None:
            setattr(model.config, f"{role}_token_id", ids[role])
    model.config.architectures = [type(model).__name__]
    yield Progress("weights", 0, 1, "files", "model.safetensors")
    model.save_pretrained(folder, max_shard_size=max_shard_size)
    yield Progress("weights", 1, 1, "files", "model.safetensors")
    save_hf_tokenizer(tokenizer, folder, getattr(model.config, "max_position_embeddings", None)
                      or getattr(model.config, "n_positions", None))
    special_map = {f"{role}_token": getattr(tokenizer, f"{role}_token") for role in ("bos", "eos", "pad", "unk")
                   if getattr(tokenizer, f"{role}_token", None)}
    if not (folder / "special_tokens_map.json").exists():
        (folder / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n", encoding="utf-8")
    GenerationConfig(bos_token_id=ids["bos"], eos_token_id=ids["eos"], pad_token_id=ids["pad"]).save_pretrained(folder)
    try:
        spec = spec_from_hf_config(model.config)
    except UserError:
        spec = None  # a foreign model: the card lists what we know
    if spec is not None:  # marks the folder as our export (model/folders.py) and keeps the designer's view of it
        (folder / "model_spec.json").write_text(spec.to_json() + "\n", encoding="utf-8")
    params = sum(p.numel() for p in model.parameters())
    card = model_card(name, spec, params, _run_info(source))
    (folder / "README.md").write_text(card, encoding="utf-8")
    for f in folder.iterdir():  # durability before the rename makes the folder visible
        f.chmod(0o644)  # some writers create 0600 files; an export is meant to be shared
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    fsync_dir(folder)


def _write_zip(folder: Path, zip_path: Path, arcroot: str) -> Iterator[Event]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    with zipfile.ZipFile(zip_path, "w", allowZip64=True) as zf:
        for i, f in enumerate(files):
            # Weights barely compress (random-looking floats): store them, deflate the text files.
            method = zipfile.ZIP_STORED if f.suffix == ".safetensors" else zipfile.ZIP_DEFLATED
            zf.write(f, f"{arcroot}/{f.relative_to(folder).as_posix()}", compress_type=method)
            yield Progress("zip", i + 1, len(files), "files", f.name)
    with open(zip_path, "rb") as fh:
        os.fsync(fh.fileno())


def _replace(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished temporary output onto `out`; an old output is removed only after that."""
    backup = None
    if out.exists() or out.is_symlink():
        if not overwrite:
            raise UserError(f"{out} already exists: choose another output path or allow overwriting (--force)")
        backup = out.with_name(f".{out.name}.old-{secrets.token_hex(4)}")
        out.rename(backup)
    try:
        tmp.rename(out)
    except BaseException:
        if backup is not None:
            backup.rename(out)
        raise
    fsync_dir(out.parent)
    if backup is not None:
        if backup.is_dir() and not backup.is_symlink():
            shutil.rmtree(backup, ignore_errors=True)
        else:
            backup.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class ExportSettings:
    """How export_model writes: replace an existing output, the GGUF type (gguf), the safetensors shard size (hf,
    zip), and merge a LoRA/QLoRA adapter into its base (required for an adapter)."""

    overwrite: bool = False
    gguf_type: str = "f16"
    max_shard_size: str | int = DEFAULT_MAX_SHARD_SIZE
    merge: bool = False


@dataclass
class _Export:
    """One export under way: what it reads and writes, and what is left to remove whatever happens."""

    src: Path
    fmt: str
    out: Path
    settings: ExportSettings
    stop: threading.Event | None  # the user's stop flag
    adapter: bool  # the source is a LoRA adapter, merged into its base on loading
    tmp: Path
    extra: list[Path] = field(default_factory=list)  # other temporaries
    result: dict[str, Any] = field(default_factory=dict)

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    @property
    def modelfile(self) -> Path | None:
        """The Ollama Modelfile written beside a GGUF."""
        return self.out.with_name(f"{self.out.stem}.Modelfile") if self.fmt == "gguf" else None

    def temporary(self, label: str) -> Path:
        """A new hidden temporary sibling of the output, removed at the end."""
        path = self.out.with_name(f".{self.out.stem}.{label}-{secrets.token_hex(4)}")
        self.extra.append(path)
        return path


def _write_gguf_and_modelfile(job: _Export, model: Any, tokenizer: Any) -> Iterator[Event]:
    """The GGUF at job.tmp (k-quants: our f32/f16 file, then llama.cpp's quantizer) and its Modelfile at a temporary
    sibling (job.result["modelfile_tmp"])."""
    from desktop_app.engine.export.gguf import GGUFFile, write_gguf  # lazy: numpy

    src, tmp, gguf_type = job.src, job.tmp, job.settings.gguf_type
    state = {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()}
    tok_file = src / "tokenizer.json" if src.is_dir() else None
    tok_json = read_tokenizer_json(tok_file) if tok_file is not None and tok_file.is_file() else \
        json.loads(tokenizer.backend_tokenizer.to_str())
    template = getattr(tokenizer, "chat_template", None)
    origin = gguf_origin(src)
    target, write_type = tmp, gguf_type
    if gguf_type in LLAMA_CPP_TYPES:  # our f32 (f16 above ~1B parameters) file first, then llama.cpp's quantizer
        target = tmp.with_name(tmp.name + ".src")
        job.extra.append(target)
        write_type = "f32" if sum(int(v.size) for v in state.values()) < 1e9 else "f16"
    yield from write_gguf(state, model.config.to_dict(),
                          GGUFTokenizer(tok_json, _special_ids(tokenizer),
                                        template if isinstance(template, str) else None, origin,
                                        **added_around_text(tokenizer)),  # llama.cpp adds what transformers adds
                          GGUFFile(target, write_type, job.out.stem), should_stop=job.stopped)
    if job.stopped():
        return
    if origin is not None:
        yield Log("info", f"kept the tokenizer of {origin.name} as it was")
    if target is not tmp:
        yield Progress("quantize", 0, 1, "files", f"llama.cpp {gguf_type}")
        quantize(target, tmp, gguf_type)
        yield Progress("quantize", 1, 1, "files", f"llama.cpp {gguf_type}")
    yield from _write_modelfile(job, model, tokenizer)


def _write_modelfile(job: _Export, model: Any, tokenizer: Any) -> Iterator[Event]:
    """The Ollama Modelfile, at a temporary sibling of the output (job.result["modelfile_tmp"])."""

    context = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    made = modelfile_text(job.out.name, tokenizer, context)
    mf_tmp = job.temporary("Modelfile.tmp")
    with open(mf_tmp, "w", encoding="utf-8") as fh:
        fh.write(made.text)
        fh.flush()
        os.fsync(fh.fileno())
    job.result["modelfile_tmp"] = str(mf_tmp)
    job.result["modelfile_template"] = made.translated
    yield Log("info" if made.translated or "no chat template" in made.note else "warning", f"Modelfile: {made.note}")


def export_model(source: str | Path, fmt: str, out: str | Path, controls: Controls | None = None, *,
                 settings: ExportSettings | None = None, **options: Any) -> Iterator[Event]:
    """Export `source` (run folder -> newest checkpoint, checkpoint, export or HF folder) to `out`.

    fmt "hf": a folder AutoModelForCausalLM/AutoTokenizer load offline (config.json, model.safetensors
    or shards + index, tokenizer.json, tokenizer_config.json, special_tokens_map.json,
    generation_config.json, README.md model card). "zip": that folder zipped (out is the .zip file).
    "gguf": one .gguf file for llama.cpp (every family of model/families.py; gguf_type f32, f16, bf16 or q8_0 written
    here, q4_k_m, q5_k_m or q6_k by llama.cpp's quantizer) and beside it NAME.Modelfile for `ollama create`.
    Ends with Finished(reason "completed", result={"path", "format", "bytes", "source"} (+ "modelfile")) or
    Finished(reason "cancelled") when controls.stop is set (nothing is left behind).
    `settings` (ExportSettings), or its fields as keywords (overwrite=, gguf_type=, max_shard_size=, merge=).
    merge: required for a LoRA/QLoRA run or adapter folder: the adapter is merged into (a copy of) its base
    and the result exported as a plain model in any format (the base on disk is untouched).
    """
    settings = replace(settings or ExportSettings(), **options)  # an unknown keyword: TypeError, as for a call
    return _export(source, fmt, out, controls, settings)


@said_as_faults("exporting the model")  # a full disk or a read-only folder: one line; the temporaries are gone
def _export(source: str | Path, fmt: str, out: str | Path, controls: Controls | None,
            settings: ExportSettings) -> Iterator[Event]:
    job = _checked_export(source, fmt, Path(out).expanduser(), controls, settings)
    try:
        yield Progress("load", 0, 1, "models", str(job.src))
        if fmt == "gguf":
            _refuse_gguf_early(job)
        model, tokenizer = _load(job.src)
        yield Progress("load", 1, 1, "models", str(job.src))
        check_export_space(job.out.parent, sum(p.numel() for p in model.parameters()), fmt, job.settings.gguf_type)
        if job.adapter:
            yield Log("info", f"merged the adapter of {job.src} into its base model")
        if not job.stopped():
            yield from _write_output(job, model, tokenizer)
        if job.stopped():
            yield Finished("cancelled", message="export cancelled")
            return
        yield from _publish(job)
    finally:
        _remove(job.tmp)
        for path in job.extra:
            _remove(path)


def _checked_export(source: str | Path, fmt: str, out: Path, controls: Controls | None,
                    settings: ExportSettings) -> _Export:
    """The export asked for, its mistakes refused before anything is loaded or written."""

    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    settings = replace(settings, gguf_type=settings.gguf_type.lower())
    if fmt == "gguf" and settings.gguf_type not in GGUF_TYPES:
        raise UserError(f"GGUF type must be one of {', '.join(GGUF_TYPES)}, got {settings.gguf_type!r}")
    modelfile = out.with_name(f"{out.stem}.Modelfile") if fmt == "gguf" else None
    src = resolve_source(source)
    adapter = is_adapter_folder(src)
    if adapter and not settings.merge:
        raise UserError(f"{src} holds a LoRA adapter, not a whole model: export it with --merge (the adapter is "
                        "merged into its base model and the result exported)")
    for path in (out, modelfile):
        if path is not None and path.exists() and not settings.overwrite:
            raise UserError(f"{path} already exists: choose another output path or allow overwriting (--force)")
    if out.resolve() == src.resolve() or src.resolve() in out.resolve().parents:
        raise UserError(f"the output {out} must not be the model folder itself or inside it")
    check_writable(out.parent, "the export folder")  # a read-only or forbidden folder: said before the model loads
    stop = controls.stop if controls is not None else None
    return _Export(src, fmt, out, settings, stop, adapter, out.with_name(f".{out.name}.tmp-{secrets.token_hex(4)}"))


def _refuse_gguf_early(job: _Export) -> None:
    """Refuse what cannot become GGUF before the weights are loaded."""

    model_type = _source_model_type(job.src)
    family = family_of(model_type)
    if family is None or not family.gguf:
        raise UserError(f"{job.src}: {no_gguf_reason(model_type)}")
    if job.settings.gguf_type in LLAMA_CPP_TYPES and not llama_cpp_available():
        raise UserError(f"GGUF type {job.settings.gguf_type} is made by llama.cpp's quantizer, which is not "
                        f"installed: {INSTALL_HINT}")


def _write_output(job: _Export, model: Any, tokenizer: Any) -> Iterator[Event]:
    """The output at job.tmp: a folder (hf), that folder zipped (zip; stops between the two when cancelled), or a
    GGUF and its Modelfile."""
    out = job.out
    if job.fmt == "gguf":
        yield from _write_gguf_and_modelfile(job, model, tokenizer)
        return
    folder = job.tmp if job.fmt == "hf" else job.temporary("tmp")
    yield from _write_hf(model, tokenizer, job.src, folder, job.settings.max_shard_size,
                         out.stem if job.fmt == "zip" else out.name)
    if job.fmt == "zip" and not job.stopped():
        yield from _write_zip(folder, job.tmp, out.stem if out.suffix == ".zip" else out.name)


def _publish(job: _Export) -> Iterator[Event]:
    """Move the finished output (and Modelfile) into place; the Finished event with the result."""
    out, result, modelfile = job.out, job.result, job.modelfile
    _replace(job.tmp, out, job.settings.overwrite)
    if modelfile is not None and "modelfile_tmp" in result:
        _replace(Path(result.pop("modelfile_tmp")), modelfile, job.settings.overwrite)
        result["modelfile"] = str(modelfile)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.is_dir() else out.stat().st_size
    yield Log("info", f"exported {job.src} as {job.fmt} to {out} ({size / 1e6:.1f} MB)")
    result.update({"path": str(out), "format": job.fmt, "bytes": size, "source": str(job.src)})
    if job.fmt == "gguf":
        result["gguf_type"] = job.settings.gguf_type
    yield Finished("completed", message=f"exported to {out}", result=result)
