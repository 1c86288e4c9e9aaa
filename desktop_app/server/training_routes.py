"""The training REST API under /api (JSON bodies, multipart for uploads), on the window's workspace.

    POST /api/models                 create a model from a preset or a spec -> models/<name>/model_spec.json
    GET  /api/models                 trained models (runs, exports, HF folders) and saved specs
    GET  /api/models/{name}/download the model as a zip of its Hugging Face folder (or ?format=gguf)
    POST /api/datasets               multipart text files -> a prepared dataset, one verdict per file
    GET  /api/datasets               prepared datasets and their sizes
    POST /api/runs                   start training from a run config (or dataset + preset/model) -> run id;
                                     "nproc": N > 1 trains on N processes (torchrun, as the window launches it)
    GET  /api/runs, /api/runs/{id}   state, step, latest metrics, ETA
    POST /api/runs/{id}/stop|pause|resume|save

Names in requests are names of workspace items (or paths inside the workspace); nothing outside the
workspace is read or written.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.background import BackgroundTask

from desktop_app.engine.errors import UserError
from desktop_app.engine.export.hf import export_model
from desktop_app.engine.model.hub_cache import model_name
from desktop_app.engine.model.sizing import count_parameters
from desktop_app.engine.presets import preset
from desktop_app.engine.session import open_session
from desktop_app.engine.specs import DataSpec, ModelSpec, load_json, save_json
from desktop_app.engine.train.request import RunRequest
from desktop_app.engine.workspace import list_generatable, slugify
from desktop_app.server.errors import ApiError, error_body
from desktop_app.server.state import get_state
from desktop_app.server.uploads import prepare_uploads, store_uploads

router = APIRouter(prefix="/api", tags=["Training"])
UPLOAD_PATH = "/api/datasets"


def _inside(workspace: Any, kind: str, value: str, what: str) -> Path:
    """A workspace item by name (`kind/<value>`) or by a path that lies inside the workspace."""
    if not value or "\x00" in value:
        raise ApiError(400, f"{what} is empty: give the name of a workspace item", param=what)
    p = Path(value).expanduser()
    root = workspace.root.resolve()
    if not p.is_absolute():
        p = workspace.folder(kind) / value if len(p.parts) == 1 else workspace.root / p
    p = p.resolve()
    if p != root and root not in p.parents:
        raise ApiError(400, f"{what} {value!r} is outside the workspace: give the name of an item in {kind}/",
                       param=what)
    if not p.exists():
        raise ApiError(404, f"no {kind[:-1]} named {value!r} in the workspace (GET /api/{kind} lists them)",
                       param=what, code="not_found")
    return p


# --- models ---------------------------------------------------------------------------------------------

class ModelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    preset: str | None = None
    spec: dict[str, Any] | None = None


@router.post("/models", status_code=201, summary="Create a model from a preset or a spec")
def create_model(body: ModelCreate, request: Request) -> dict[str, Any]:
    ws = get_state(request).workspace
    if (body.preset is None) == (body.spec is None):
        raise ApiError(400, "give exactly one of 'preset' (a preset name) or 'spec' (a model spec object)",
                       param="spec")
    spec = (preset(body.preset) if body.preset is not None else ModelSpec.from_dict(body.spec or {})).check()
    folder = ws.folder("models") / slugify(body.name)
    if folder.exists():
        raise ApiError(409, f"a model named {folder.name!r} already exists", param="name", code="exists")
    folder.mkdir(parents=True)
    save_json(spec.to_dict(), folder / "model_spec.json")
    return {"name": folder.name, "kind": "spec", "path": str(folder), "spec": spec.to_dict(),
            "parameters": count_parameters(spec)}


@router.get("/models", summary="List models: trained ones (downloadable) and saved specs")
def list_models(request: Request) -> dict[str, Any]:
    ws = get_state(request).workspace
    models = [{"name": c.path.name, "kind": c.kind, "label": c.name, "path": str(c.path), "downloadable": True}
              for c in list_generatable(ws)]
    for item in ws.items("models"):
        is_spec_dir = item.is_dir() and (item / "model_spec.json").is_file() and not (item / "config.json").is_file()
        if is_spec_dir or (item.is_file() and item.suffix == ".json"):
            models.append({"name": item.name, "kind": "spec", "label": item.name, "path": str(item),
                           "downloadable": False})
    return {"models": models}


def _model_source(workspace: Any, name: str) -> Path:
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ApiError(404, f"no model {name!r}", code="not_found")
    for kind in ("runs", "exports", "models"):
        candidate = workspace.folder(kind) / name
        if candidate.is_dir():
            return candidate
    raise ApiError(404, f"no model named {name!r} in the workspace (GET /api/models lists them)", code="not_found")


def _export(source: Path, fmt: str, out: Path) -> None:
    last = None
    for event in export_model(source, fmt, out):
        last = event
    if last is None or getattr(last, "reason", "") != "completed":
        raise ApiError(500, f"the export did not complete: {getattr(last, 'message', 'no result')}")


@router.get("/models/{name}/download", summary="Download a model: its Hugging Face folder as a zip, or GGUF",
            response_class=FileResponse)
def download_model(name: str, request: Request,
                   format: Literal["zip", "hf", "gguf"] = Query("zip", description="zip (= hf): the Hugging Face "
                                                                "folder zipped; gguf: one file for llama.cpp")):
    ws = get_state(request).workspace
    source = _model_source(ws, name)
    fmt = "gguf" if format == "gguf" else "zip"
    # A hidden folder under exports/ (the Library skips hidden names), removed once the file is sent.
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=ws.folder("exports")))
    out = tmp / f"{slugify(name)}.{fmt}"
    try:
        _export(source, fmt, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return FileResponse(out, filename=out.name, media_type="application/zip" if fmt == "zip" else
                        "application/octet-stream", background=BackgroundTask(shutil.rmtree, tmp, True))


# --- datasets -------------------------------------------------------------------------------------------

@router.post("/datasets", status_code=201, summary="Upload text files into a new (or existing) dataset",
             response_model=None)
async def upload_dataset(request: Request,
                         files: list[UploadFile] = File(..., description="text, documents or tables (.txt .md "
                                                                         ".jsonl .pdf .epub .docx .html .csv .tsv "
                                                                         ".parquet)"),
                         name: str = Form("dataset", description="name of the new dataset"),
                         spec: str = Form("", description="DataSpec as JSON, e.g. {\"vocab_size\": 4096, "
                                                          "\"context_length\": 256}"),
                         append_to: str = Form("", description="add the files to this existing dataset instead")
                         ) -> JSONResponse:
    ws = get_state(request).workspace
    data_spec = None
    if spec:
        try:
            data_spec = DataSpec.from_dict(json.loads(spec)).check()
        except json.JSONDecodeError as exc:
            raise ApiError(400, f"spec is not valid JSON: {exc.msg}", param="spec") from None
        except UserError as exc:
            raise ApiError(400, f"spec: {exc}", param="spec") from None
    target = _inside(ws, "datasets", append_to, "append_to") if append_to else None
    stored = await run_in_threadpool(store_uploads, ws, name, [(f.filename, f.file) for f in files])
    result = await run_in_threadpool(prepare_uploads, ws, name, stored, data_spec, target)
    if result["state"] != "completed":
        body = error_body(result["message"] or "the dataset could not be prepared", param="files",
                          code="dataset_not_prepared", files=result["files"], dataset=result["dataset"])
        return JSONResponse(body, status_code=422)
    return JSONResponse(result, status_code=201)


@router.get("/datasets", summary="List prepared datasets")
def list_datasets(request: Request) -> dict[str, Any]:
    ws = get_state(request).workspace
    out = []
    for item in ws.items("datasets"):
        manifest_file = item / "manifest.json"
        if not manifest_file.is_file():
            continue
        try:
            m = json.loads(manifest_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out.append({"name": item.name, "path": str(item), "problem": "unreadable manifest.json"})
            continue
        splits = m.get("splits", {})
        sources = m.get("sources", [])
        out.append({"name": item.name, "path": str(item), "created": m.get("created"), "updated": m.get("updated"),
                    "vocab_size": m.get("tokenizer", {}).get("vocab_size"),
                    "context_length": m.get("chunking", {}).get("context_length"),
                    "tokens": {s: v.get("tokens", 0) for s, v in splits.items()},
                    "documents": {s: v.get("documents", 0) for s, v in splits.items()},
                    "files": {"ok": sum(s.get("verdict") == "ok" for s in sources),
                              "problems": sum(s.get("verdict") != "ok" for s in sources)}})
    return {"datasets": out}


# --- runs -----------------------------------------------------------------------------------------------

class RunCreate(BaseModel):
    """Either `config` (a whole run.json), or `dataset` plus one of `preset`, `model` or `base_model`."""

    model_config = ConfigDict(extra="forbid")
    name: str = ""
    dataset: str = ""
    preset: str | None = None
    model: dict[str, Any] | str | None = None
    base_model: str | None = None
    train: dict[str, Any] = {}
    seed: int = 1337
    objective: str = "causal_lm"
    config: dict[str, Any] | None = None
    nproc: int = 1  # processes to train on (torchrun on this machine); 1 = in the server's own process
    force: bool = False  # start even when the engine's preflight says the run cannot work here (the CLI's --force)


MAX_NPROC = 64


def _load_spec(ws: Any, name: str) -> Any:
    path = _inside(ws, "models", name, "model")
    file = path / "model_spec.json" if path.is_dir() else path
    if not file.is_file():
        raise ApiError(400, f"model {name!r} has no model_spec.json (use base_model to continue a trained model)",
                       param="model")
    data = load_json(file)
    return ModelSpec.from_dict(data["model"] if isinstance(data.get("model"), dict) else data)


def _base_model(ws: Any, value: str) -> Path:
    """A trained model to start from: a run, export or model name, or a path inside the workspace."""
    if value and "/" not in value and "\\" not in value:
        return _model_source(ws, value)
    return _inside(ws, "models", value, "base_model")


def build_run_request(ws: Any, body: RunCreate) -> RunRequest:
    """The request a body describes (this only turns workspace names into paths; the engine's session plans,
    fits and checks it)."""
    if not 1 <= body.nproc <= MAX_NPROC:
        raise ApiError(400, f"nproc must be a whole number from 1 to {MAX_NPROC}: the processes to train on "
                            "(usually the number of GPUs)", param="nproc")
    processes = {"nproc_per_node": body.nproc} if body.nproc > 1 else {}
    if body.config is not None:
        if any([body.dataset, body.preset, body.model, body.base_model, body.train]):
            raise ApiError(400, "give either 'config' (a whole run config) or dataset/preset/model/train, not both",
                           param="config")
        config = dict(body.config)
        if processes:
            config["distributed"] = {**(config.get("distributed") or {}), **processes}
        config["dataset"] = str(_inside(ws, "datasets", str(config.get("dataset", "")), "config.dataset"))
        if config.get("base_model"):
            config["base_model"] = str(_base_model(ws, str(config["base_model"])))
        return RunRequest(config=config)
    sources = [x for x in (body.preset, body.model, body.base_model) if x is not None]
    if len(sources) != 1:
        raise ApiError(400, "give exactly one of 'preset', 'model' (a spec object or the name of a created model) "
                            "or 'base_model' (a trained model to continue)", param="model")
    request = RunRequest(dataset=str(_inside(ws, "datasets", body.dataset, "dataset")), objective=body.objective,
                         train=body.train, seed=body.seed, distributed=processes)
    if body.base_model is not None:
        request.base_model = str(_base_model(ws, body.base_model))
    elif body.preset is not None:
        request.preset = body.preset
    else:
        request.model = body.model if isinstance(body.model, dict) else _load_spec(ws, str(body.model)).to_dict()
    return request


def _notes(session: Any, force: bool) -> list[str]:
    """What the engine adapted and what it found before start; a run its preflight says cannot work here (an error
    finding: too big for this machine's memory, ...) is refused as the window and the CLI refuse it, unless `force`."""
    errors = session.errors()
    if errors and not force:
        raise ApiError(422, "this run cannot work on this machine: " + " ".join(errors)
                       + " (send \"force\": true to start it anyway)", param="train")
    return session.notes + [f"{f.level}: {f.message}" for f in session.findings]


@router.post("/runs", status_code=201, summary="Start a training run; returns its id")
def start_run(body: RunCreate, request: Request) -> dict[str, Any]:
    state = get_state(request)
    session = open_session(build_run_request(state.workspace, body))
    notes = _notes(session, body.force)
    config = session.prepared.config
    name = body.name or (model_name(config.base_model) if config.base_model else config.model.get("family", "run"))
    run = state.runs.start(session.at(state.workspace.new_run_dir(slugify(name))))
    return {**run.status(), "notes": notes}


@router.get("/runs", summary="List runs (started here, in the window or by the CLI)")
def list_runs(request: Request) -> dict[str, Any]:
    return {"runs": get_state(request).runs.list()}


@router.get("/runs/{run_id}", summary="State, step, latest metrics and ETA of a run")
def run_status(run_id: str, request: Request) -> dict[str, Any]:
    return get_state(request).runs.status(run_id)


@router.post("/runs/{run_id}/{action}", summary="stop (saves), pause, resume (also restarts a stopped run), "
                                                "save a checkpoint now, or retry a save the disk refused")
def control_run(run_id: str, action: Literal["stop", "pause", "resume", "save", "retry"],
                request: Request) -> dict[str, Any]:
    return get_state(request).runs.control(run_id, action)
