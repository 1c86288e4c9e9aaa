"""The benchmarks' datasets: fetched once by an explicit choice, cached, and read offline ever after.

Rules (as for models, issue 37): nothing here touches the network unless the person asks for a fetch
(`fetch_benchmark_data`: `benchmarks fetch NAMES`, or the Evaluate view's "Fetch data" button); a fetch goes through
the app's network switch (engine/hub/network.online: NetworkOff before any request when network features are off)
and reports the same DownloadProgress / DownloadCancelled events as a model download. An evaluation runs inside
`datasets_offline()`, so the harness's `datasets.load_dataset` reads the datasets library's own cache and never the
network; `check_benchmark_data` says beforehand, in one sentence, what is missing and how to fetch it.

How a fetch works, and why:
- The datasets library resolves a task's config to its data files (`load_dataset_builder`: a few small metadata
  requests); huggingface_hub's own `hf_hub_download` puts each file in the shared Hugging Face cache (the same one
  models use) with byte progress through its `tqdm_class` hook, which is also where a cancel is seen (between two
  chunks). Then the builder prepares the dataset (`download_and_prepare`: Arrow files in the datasets cache) from
  those cached files without fetching them again. Offline, `load_dataset` finds that prepared copy
  (the datasets library's cached-dataset path), which is what "ready" means here.
- huggingface_hub 2.x does not resume a file across calls; benchmark files are small (MMLU's are a few MB each), so
  a cancelled file is fetched again from its start, and the files already fetched stay.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.benchmark_catalog import (
    DatasetRef,
    check_names,
    require_harness,
    task_datasets,
    task_index,
)
from desktop_app.engine.events import Controls, Event, Progress
from desktop_app.engine.hub.download import DownloadCancelled, relay_progress, small_chunks
from desktop_app.engine.hub.errors import hub_error
from desktop_app.engine.hub.network import hub_endpoint, online
from desktop_app.engine.model.hub_cache import hub_cache_dir
from desktop_app.engine.os_faults import check_free_space
from desktop_app.engine.paths import cli_exe

FETCH_BUTTON = "Fetch data (Library → Evaluate…, under Standard benchmarks)"
NOT_FOUND_ERRORS = ("DatasetNotFoundError", "DataFilesNotFoundError", "EmptyDatasetError")


class BenchmarkDataMissing(UserError):
    """Benchmarks whose data is not on this computer. `names`: the benchmarks to fetch; `files`: local data files a
    task names that do not exist (nothing to fetch: the person restores them)."""

    def __init__(self, names: list[str], include_dir: str = "", files: list[str] | None = None) -> None:
        self.names, self.files = names, files or []
        if self.files:
            shown = ", ".join(self.files[:3]) + (f" and {len(self.files) - 3} more" if len(self.files) > 3 else "")
            super().__init__(f"the data file(s) {shown} of benchmark {', '.join(names)} do not exist: put them back "
                             "or correct the task's data_files")
        else:
            super().__init__(f"the data of {', '.join(names)} is not on this computer yet: fetch it first with "
                             f"{FETCH_BUTTON} or `{cli_exe()} {fetch_command(names, include_dir)}` (the network "
                             "is needed once; evaluations then run offline)")


@dataclass
class BenchmarkDataFetched(Event):
    """The fetch ended: every named benchmark's data is on this computer."""

    type: ClassVar[str] = "benchmark_data_fetched"
    names: list[str]
    datasets: list[str] = field(default_factory=list)  # the datasets fetched now (labels); [] when all were there
    fetched: int = 0  # bytes fetched over the network


def fetch_command(names: list[str], include_dir: str = "") -> str:
    """The CLI command that fetches the data of `names` (what the missing-data sentence tells people to run)."""
    folder = f" --dir {include_dir}" if include_dir else ""
    return f"benchmarks fetch {','.join(names)}{folder}"


# --- the offline and online switches of the datasets library ---------------------------------------------------

class _DatasetsSwitch:
    """datasets' offline constants (read once, at import), decided by the calls that run now: online while any fetch
    runs (it needs the network), else offline while any evaluation runs, else as they were before the first call.
    Counted, so calls that overlap on several threads, in any order, never leave a wrong value behind.
    huggingface_hub's own offline constant is not touched here: it belongs to engine.hub.network (a fetch lifts it
    with `online()`), so an evaluation never blocks a model download that runs beside it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.votes = {True: 0, False: 0}  # offline -> how many calls want it
        self.saved: tuple[Any, Any, Any] | None = None
        self.endpoint: str | None = None  # the fetches' endpoint (they share the app's one)

    @contextlib.contextmanager
    def __call__(self, offline: bool, endpoint: str | None = None) -> Iterator[None]:
        try:
            from datasets import config
        except ImportError:  # no datasets library: nothing reads the switch
            yield
            return
        with self.lock:
            if self.saved is None:
                self.saved = (config.HF_HUB_OFFLINE, config.HF_DATASETS_OFFLINE, config.HF_ENDPOINT)
            self.votes[offline] += 1
            if endpoint and not offline:
                self.endpoint = endpoint
            self._apply(config)
        try:
            yield
        finally:
            with self.lock:
                self.votes[offline] -= 1
                self._apply(config)

    def _apply(self, config: Any) -> None:
        assert self.saved is not None
        if self.votes[False]:
            config.HF_HUB_OFFLINE = config.HF_DATASETS_OFFLINE = False
            config.HF_ENDPOINT = self.endpoint or self.saved[2]
        elif self.votes[True]:
            config.HF_HUB_OFFLINE = config.HF_DATASETS_OFFLINE = True
            config.HF_ENDPOINT = self.saved[2]
        else:
            config.HF_HUB_OFFLINE, config.HF_DATASETS_OFFLINE, config.HF_ENDPOINT = self.saved
            self.saved, self.endpoint = None, None


_switched = _DatasetsSwitch()


@contextlib.contextmanager
def datasets_offline() -> Iterator[None]:
    """Run an evaluation with the datasets library offline: the harness's `load_dataset` reads the cache (a prepared
    dataset, or local files) and never reaches the network, unless a fetch runs beside it. Restored afterwards."""
    with _switched(True):
        yield


@contextlib.contextmanager
def datasets_online(endpoint: str) -> Iterator[None]:
    """Run a fetch with the datasets library online on `endpoint` (inside engine.hub.network.online, which checks
    the person's network switch and lifts huggingface_hub's own constant). Restored afterwards."""
    with _switched(False, endpoint):
        yield


# --- what is on this computer ------------------------------------------------------------------------------------

def datasets_cache_dir() -> Path:
    """The datasets library's own cache of prepared datasets (HF_DATASETS_CACHE, default HF_HOME/datasets)."""
    from datasets import config as ds_config

    return Path(ds_config.HF_DATASETS_CACHE).expanduser()


def dataset_ready(ref: DatasetRef) -> bool:
    """Whether a Hub dataset (that config) is prepared in the datasets cache, where an offline `load_dataset` finds
    it (the layout of datasets' cached-dataset loader: <namespace>___<name>/<config>/<version>/<hash>/)."""
    from datasets.naming import camelcase_to_snakecase

    parts = ref.path.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    root = datasets_cache_dir() / "___".join(parts)
    configs = [root / ref.name] if ref.name else (list(root.iterdir()) if root.is_dir() else [])
    return any(info.is_file() for config in configs for info in config.glob("*/*/dataset_info.json"))


def ref_state(ref: DatasetRef) -> str:
    """"local" (local files, all present), "ready" (a Hub dataset prepared in the cache) or "missing"."""
    if ref.local:
        return "missing" if ref.missing_files() else "local"
    return "ready" if dataset_ready(ref) else "missing"


def data_state(names: list[str], include_dir: str = "") -> dict[str, str]:
    """Each name -> "ready" (its Hub data is in the cache), "local" (it reads local files, all present), "missing"
    (something must be fetched or restored) or "unknown" (no such task, group or tag). A group is "missing" when
    any of its tasks is. Reads only the disk."""
    index = task_index(include_dir)
    out: dict[str, str] = {}
    for name in names:
        if name not in index:
            out[name] = "unknown"
            continue
        states = {ref_state(ref) for ref in task_datasets([name], include_dir)}
        out[name] = "missing" if "missing" in states else ("ready" if "ready" in states else "local")
    return out


def check_benchmark_data(names: list[str], include_dir: str = "") -> None:
    """Before an evaluation (before any model loads): UnknownBenchmark for a name the harness does not know,
    BenchmarkDataMissing (one sentence: what to fetch and how, or which local files are gone) when a benchmark's
    data is not on this computer. Reads only the disk."""
    needs = {name: task_datasets([name], include_dir) for name in check_names(names, include_dir)}
    lost = {name: [f for ref in refs for f in ref.missing_files()] for name, refs in needs.items()}
    if any(lost.values()):
        files = list(dict.fromkeys(f for found in lost.values() for f in found))
        raise BenchmarkDataMissing([n for n, found in lost.items() if found], include_dir, files)
    missing = [name for name, refs in needs.items() if any(ref_state(ref) == "missing" for ref in refs)]
    if missing:
        raise BenchmarkDataMissing(missing, include_dir)


# --- the fetch ---------------------------------------------------------------------------------------------------

@dataclass
class FetchPlan:
    """What one fetch moves: each Hub file (repository, commit, path in it, size) of the datasets to prepare.
    `repo_id` is what progress events name (the datasets, as people read them)."""

    repo_id: str
    refs: list[DatasetRef]
    builders: list[Any]
    files: list[tuple[str, str, str, int]]
    total: int = 0
    have: int = 0  # bytes already in the Hugging Face cache


def plan_fetch(refs: list[DatasetRef]) -> FetchPlan:
    """Resolve each dataset config to its data files and their sizes (metadata requests only: call inside
    `online()`), and what the cache already holds of them."""
    import datasets
    from huggingface_hub import HfFileSystem, try_to_load_from_cache

    builders, files = [], []
    for ref in refs:
        builder = datasets.load_dataset_builder(ref.path, ref.name, **ref.kwargs)
        builders.append(builder)
        urls = [str(u) for split in (builder.config.data_files or {}).values() for u in split]
        files += _hub_files(urls, HfFileSystem(endpoint=hub_endpoint()))
    plan = FetchPlan(", ".join(r.label for r in refs), refs, builders, sorted(set(files)))
    plan.total = sum(size for *_, size in plan.files)
    plan.have = sum(size for repo, rev, path, size in plan.files
                    if isinstance(try_to_load_from_cache(repo, path, revision=rev, repo_type="dataset"), str))
    return plan


def _hub_files(urls: list[str], fs: Any) -> list[tuple[str, str, str, int]]:
    """(repository, commit, path, size) of each hf:// data file URL (sizes from the Hub's paths-info)."""
    from huggingface_hub import HfApi

    by_repo: dict[tuple[str, str], list[str]] = {}
    for url in urls:
        if url.startswith("hf://"):
            resolved = fs.resolve_path(url)
            by_repo.setdefault((resolved.repo_id, str(resolved.revision)), []).append(resolved.path_in_repo)
    out = []
    api = HfApi(endpoint=hub_endpoint())
    for (repo, rev), paths in by_repo.items():
        for info in api.get_paths_info(repo, paths, repo_type="dataset", revision=rev):
            out.append((repo, rev, info.path, int(getattr(info, "size", 0) or 0)))
    return out


class _Stopped(Exception):
    """Raised inside the transfer when the person cancels (between two chunks of a file)."""


class FetchTransfer:
    """The download thread of one fetch and what it shares with the generator (the shape relay_progress reads:
    plan.repo_id / total / have, stop, fetched, file)."""

    def __init__(self, plan: FetchPlan, stop: threading.Event) -> None:
        self.plan, self.stop = plan, stop
        self.fetched, self.file = 0, ""
        self.error: BaseException | None = None
        self.finished = False
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        if self.stop.is_set():
            raise _Stopped
        with self.lock:
            self.fetched += n

    def run(self) -> None:
        from huggingface_hub import hf_hub_download

        transfer = self

        class Relay:  # huggingface_hub's tqdm_class hook: each chunk's bytes, and the place a cancel is seen
            def __init__(self, **_: Any) -> None:
                pass

            def __enter__(self) -> Relay:
                return self

            def __exit__(self, *exc: Any) -> None:
                return None

            def update(self, n: float = 1) -> None:
                transfer.add(int(n))

            def close(self) -> None:
                return None

        try:
            for repo, rev, path, _size in self.plan.files:
                if self.stop.is_set():
                    return
                self.file = path
                hf_hub_download(repo, path, repo_type="dataset", revision=rev, endpoint=hub_endpoint(),
                                tqdm_class=Relay)
            self.finished = True
        except _Stopped:
            return
        except BaseException as exc:  # told in the generator's thread, as a sentence
            self.error = exc


def fetch_benchmark_data(names: list[str], include_dir: str = "", controls: Controls | None = None) \
        -> Iterator[Event]:
    """Fetch the data of the named benchmarks (groups and tags: all their tasks) into the caches, the explicit
    choice the network switch allows: DownloadProgress (bytes, speed, time left; as model downloads), Progress while
    each dataset is prepared, then BenchmarkDataFetched; DownloadCancelled when controls.stop is set. NetworkOff
    before any request when network features are off; BenchmarkDataMissing for local files that do not exist."""
    require_harness()  # before the task index, which may be cached from an earlier call
    controls = controls or Controls()
    refs = task_datasets(names, include_dir)
    lost = [f for ref in refs for f in ref.missing_files()]
    if lost:
        raise BenchmarkDataMissing(names, include_dir, lost)
    todo = [ref for ref in refs if not ref.local and not dataset_ready(ref)]
    if not todo:
        yield BenchmarkDataFetched(names)
        return
    with online(), datasets_online(hub_endpoint()), small_chunks():
        plan = _planned(todo)
        transfer = FetchTransfer(plan, controls.stop)
        yield from _transfer(transfer)
        if controls.stop.is_set() and not transfer.finished:
            yield DownloadCancelled(plan.repo_id, plan.have + transfer.fetched, plan.total)
            return
        for i, (ref, builder) in enumerate(zip(plan.refs, plan.builders, strict=True)):
            yield Progress("preparing benchmark data", i, len(plan.refs), "datasets", ref.label)
            _prepare(ref, builder)
    yield BenchmarkDataFetched(names, [r.label for r in todo], transfer.fetched)


def _planned(todo: list[DatasetRef]) -> FetchPlan:
    try:
        plan = plan_fetch(todo)
    except Exception as exc:
        raise fetch_error(exc, todo) from None
    check_free_space(hub_cache_dir(), plan.total - plan.have, f"the benchmark data ({plan.repo_id})")
    return plan


def _transfer(transfer: FetchTransfer) -> Iterator[Event]:
    thread = threading.Thread(target=transfer.run, name="azr-benchmark-data", daemon=True)
    thread.start()
    try:
        yield from relay_progress(transfer, thread)  # type: ignore[arg-type]  # the shape it reads
    except GeneratorExit:  # the consumer went away: the transfer stops at its next chunk
        transfer.stop.set()
        raise
    if not transfer.stop.is_set():
        thread.join()
    if transfer.error is not None:
        plan = transfer.plan
        raise hub_error(transfer.error, plan.repo_id, done=plan.have + transfer.fetched, total=plan.total)


def _prepare(ref: DatasetRef, builder: Any) -> None:
    """The builder writes the prepared dataset (Arrow) into the datasets cache from the files just fetched."""
    from datasets.utils import disable_progress_bars, enable_progress_bars, is_progress_bar_enabled

    shown = is_progress_bar_enabled()
    disable_progress_bars()  # the app reports its own progress; the library's bars would clutter a terminal
    try:
        builder.download_and_prepare()
    except Exception as exc:
        raise fetch_error(exc, [ref]) from None
    finally:
        if shown:
            enable_progress_bars()


def fetch_error(exc: BaseException, refs: list[DatasetRef]) -> UserError:
    """A fetch failure as one sentence: the Hub's errors as for models; a dataset the Hub does not offer says what
    the person can do about it: check their own task's YAML file, or, for the harness's own task (nothing they set),
    update the harness."""
    if isinstance(exc, UserError):
        return exc
    label = ", ".join(r.label for r in refs)
    if type(exc).__name__ not in NOT_FOUND_ERRORS:
        return hub_error(exc, label)
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    tasks = list(dict.fromkeys(t for r in refs for t in r.tasks))
    shown = ", ".join(tasks[:3]) + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")
    own = next((r.task_file for r in refs if r.task_file), "")
    if own:
        return UserError(f"the data of {shown} cannot be fetched: the Hub has no dataset {label} ({text}); check "
                         f"dataset_path and dataset_name in your task file {own}")
    return UserError(f"the data of {shown} cannot be fetched: the Hub does not offer {label} in a form the "
                     f"installed datasets library reads ({text}); this is lm-evaluation-harness's own task, so "
                     "nothing you set is wrong, and a newer harness may fix it: pip install -U "
                     '"azr-model-trainer[benchmarks]"')
