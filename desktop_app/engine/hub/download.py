"""Download a Hub repository's files into the Hugging Face cache, with progress, cancel, resume and the Hub's hashes.

`pull` is a generator of events like every long job: DownloadProgress (at most EVENTS_PER_S a second), then
DownloadFinished, or DownloadCancelled when controls.stop is set. Its checks run before any byte is fetched
(`plan_pull`: the repository, the files, the free disk).

How the bytes move, and why:
- huggingface_hub's own transfer (`file_download.http_get`: the Range request, its retries on a dropped connection,
  the size check) writes each file into `blobs/<hash>.incomplete` of the cache; then `hf_hub_download` puts it in
  place (the snapshot link, the refs) exactly as for any download of that library, so other tools share the files.
- huggingface_hub 2.x no longer resumes across calls (it writes to a temporary file of its own and deletes it on
  failure), so the `.incomplete` file is ours: it stays after a cancel, a crash or a lost connection, and the next
  pull hands its length to http_get as `resume_size` (an HTTP Range): never a restart from zero. The library's lock
  file for that blob is held meanwhile, so two pulls never write one file.
- The library keeps only whole chunks when a transfer breaks; chunks are CHUNK_BYTES while a pull runs (not 10 MB)
  so a resume re-fetches at most that much, progress moves smoothly, and a cancel is seen within a chunk.
- Afterwards every file is checked against the Hub's hashes (sha256 of LFS files, the git blob id of the others);
  a damaged file is deleted, so pulling again fetches it anew.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Log, Transient
from desktop_app.engine.hub.details import SAFETENSORS_LABEL, details_from_info, fetch_info
from desktop_app.engine.hub.errors import NoMatchingFiles, NotEnoughDisk, existing_parent, hub_error
from desktop_app.engine.hub.network import hub_endpoint, online
from desktop_app.engine.hub.overrides import SharedOverride
from desktop_app.engine.model.hub_cache import hub_cache_dir

CHUNK_BYTES = 256 * 1024
EVENTS_PER_S = 10
STOP_WAIT_S = 1.0  # how long a cancel waits for the transfer to notice (it does at its next chunk)
_SMALL_CHUNKS = SharedOverride("huggingface_hub.constants", "DOWNLOAD_CHUNK_SIZE", CHUNK_BYTES)


@dataclass
class PullPlan:
    repo_id: str
    revision: str  # the commit
    files: list[tuple[str, int]]  # (name, size)
    total: int
    have: int  # bytes already in the cache (complete, or .incomplete from an earlier pull)
    cache_dir: Path
    hashes: dict[str, str] = field(default_factory=dict)  # name -> the Hub's sha256 (LFS) or git blob id

    @property
    def storage(self) -> Path:
        """The repository's folder in the cache (blobs/, snapshots/, refs/)."""
        from huggingface_hub.file_download import repo_folder_name

        return self.cache_dir / repo_folder_name(repo_id=self.repo_id, repo_type="model")

    def blob(self, name: str) -> Path:
        return self.storage / "blobs" / self.hashes[name]

    @property
    def snapshot(self) -> Path:
        return self.storage / "snapshots" / self.revision


@dataclass
class DownloadProgress(Transient):
    type: ClassVar[str] = "download"
    repo_id: str
    file: str  # the file being fetched
    done: int  # bytes of the whole pull, those already in the cache included
    total: int
    speed: float  # bytes/s, smoothed
    eta_s: float  # -1: unknown


@dataclass
class DownloadFinished(Event):
    type: ClassVar[str] = "downloaded"
    repo_id: str
    folder: str  # the snapshot folder, or the .gguf file when one GGUF file was pulled
    files: list[str]
    verified: bool
    fetched: int  # bytes fetched over the network by this pull


@dataclass
class DownloadCancelled(Event):
    type: ClassVar[str] = "download_cancelled"
    repo_id: str
    done: int  # bytes in the cache now: the next pull resumes from there
    total: int


# --- the plan: what to fetch, checked before any byte moves ------------------------------------------------------

def plan_pull(repo_id: str, patterns: list[str] | None = None, revision: str | None = None) -> PullPlan:
    """The files of `repo_id` that `patterns` select (None: its safetensors set), their sizes and what the cache
    holds of them. RepoMissing, RepoGated, NoMatchingFiles, NotEnoughDisk, NetworkOff or ConnectionLost."""
    info = fetch_info(repo_id, revision)
    siblings = {s.rfilename: s for s in info.siblings or []}
    names = chosen_files(repo_id, info, patterns)
    if info.gated:
        check_access(repo_id, names[0], str(info.sha))
    plan = PullPlan(repo_id, str(info.sha), [(n, int(siblings[n].size or 0)) for n in names], 0, 0, hub_cache_dir(),
                    {n: siblings[n].lfs.sha256 if siblings[n].lfs else str(siblings[n].blob_id) for n in names})
    plan.total = sum(size for _, size in plan.files)
    plan.have = sum(bytes_in_cache(plan, name, size) for name, size in plan.files)
    check_disk(plan)
    return plan


def chosen_files(repo_id: str, info: Any, patterns: list[str] | None) -> list[str]:
    """The repository's files `patterns` match (huggingface_hub's own matching), or its safetensors set."""
    from huggingface_hub.utils import filter_repo_objects

    details = details_from_info(info)
    ggufs = [f for s in details.file_sets if s.kind == "gguf" for f in s.files]
    if patterns is None:
        safetensors = next((s for s in details.file_sets if s.label == SAFETENSORS_LABEL), None)
        if safetensors is None:
            raise NoMatchingFiles(repo_id, None, ggufs)
        patterns = list(safetensors.patterns)
    names = sorted(filter_repo_objects([s.rfilename for s in info.siblings or []], allow_patterns=patterns))
    if not names:
        raise NoMatchingFiles(repo_id, patterns, ggufs)
    return names


def check_access(repo_id: str, name: str, revision: str) -> None:
    """RepoGated now, before any plan is shown or byte fetched: the Hub describes a gated repository to anyone and
    refuses only its files (a HEAD of one file, with the token huggingface_hub finds: HF_TOKEN or `hf auth login`)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    try:
        with online():
            get_hf_file_metadata(hf_hub_url(repo_id, name, revision=revision, endpoint=hub_endpoint()))
    except Exception as exc:
        raise hub_error(exc, repo_id) from None


def bytes_in_cache(plan: PullPlan, name: str, size: int) -> int:
    """Bytes of one file the cache already holds: all of it, or what an interrupted pull left."""
    blob = plan.blob(name)
    if blob.is_file():
        return size
    partial = blob.with_name(blob.name + ".incomplete")
    return min(partial.stat().st_size, size) if partial.is_file() else 0


def check_disk(plan: PullPlan) -> None:
    """NotEnoughDisk unless the missing bytes fit in the free space of the cache's disk."""
    missing = plan.total - plan.have
    free = shutil.disk_usage(existing_parent(plan.cache_dir)).free
    if missing > free:
        raise NotEnoughDisk(plan.repo_id, missing, free, plan.cache_dir)


# --- the transfer: a thread, relayed as events ------------------------------------------------------------------

class _Stopped(Exception):
    """Raised inside the transfer when the person cancels: the .incomplete file stays."""


class Transfer:
    """One pull's download thread and what it shares with the generator (byte counts, the file, its error)."""

    def __init__(self, plan: PullPlan, stop: threading.Event) -> None:
        self.plan, self.stop = plan, stop
        self.fetched = 0
        self.file = plan.files[0][0] if plan.files else ""
        self.error: BaseException | None = None
        self.finished = False
        self.abandoned = False  # the generator was closed before the end: stop as for a cancel
        self.sums: dict[str, str] = {}  # name -> sha256 of the bytes written now (hashed on the way)
        self.lock = threading.Lock()

    def stopping(self) -> bool:
        return self.stop.is_set() or self.abandoned

    def add(self, n: int) -> None:
        if self.stopping():
            raise _Stopped
        with self.lock:
            self.fetched += n

    def run(self) -> None:
        try:
            for name, size in self.plan.files:
                if self.stopping():
                    return
                self.file = name
                digest = fetch_file(self.plan, name, size, functools.partial(_Relay, self))
                if digest is not None:
                    self.sums[name] = digest
            self.finished = True
        except _Stopped:
            return
        except BaseException as exc:  # told in the generator's thread, as a sentence
            self.error = exc


class _Relay:
    """What huggingface_hub's http_get takes as its tqdm_class: each chunk's bytes go to the Transfer (which
    raises there when cancelled, between two chunks)."""

    def __init__(self, transfer: Transfer, **_: Any) -> None:
        self.transfer = transfer

    def __enter__(self) -> _Relay:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def update(self, n: float = 1) -> None:
        self.transfer.add(int(n))

    def close(self) -> None:
        return None


def fetch_file(plan: PullPlan, name: str, size: int, relay: Any) -> str | None:
    """One file into the cache: resume its .incomplete blob with http_get, then let hf_hub_download link it. Returns
    the sha256 of what was written when it was hashed on the way (an LFS file fetched now), else None."""
    from huggingface_hub import hf_hub_download, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    blob, digest = plan.blob(name), None
    if not blob.is_file():
        lock = plan.cache_dir / ".locks" / plan.storage.name / f"{blob.name}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        blob.parent.mkdir(parents=True, exist_ok=True)
        partial = blob.with_name(blob.name + ".incomplete")
        with WeakFileLock(lock):
            with partial.open("ab") as out:
                if out.tell() > size:  # not this file's beginning: start it again
                    out.truncate(0)
                writer = HashingWriter(out, partial)
                url = hf_hub_url(plan.repo_id, name, revision=plan.revision, endpoint=hub_endpoint())
                http_get(url, writer, resume_size=out.tell(), headers=build_hf_headers(), expected_size=size,
                         displayed_filename=name, tqdm_class=relay)
            os.replace(partial, blob)
        digest = writer.hexdigest()
    hf_hub_download(plan.repo_id, name, revision=plan.revision, cache_dir=plan.cache_dir, endpoint=hub_endpoint())
    return digest


class HashingWriter:
    """The .incomplete file as http_get writes it, hashed (sha256) on the way, so checking it against the Hub's hash
    needs no second read of the file. What an earlier pull left is hashed first; a seek or truncate (a server that
    ignored the Range: http_get starts the file again) leaves the hash unknown, and the check reads the file."""

    def __init__(self, out: Any, path: Path) -> None:
        self.out, self.sha, self.valid = out, hashlib.sha256(), True
        if out.tell():
            with path.open("rb") as earlier:
                for block in iter(lambda: earlier.read(1 << 20), b""):
                    self.sha.update(block)

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.out.write(data)

    def tell(self) -> int:
        return self.out.tell()

    def seek(self, *args: Any) -> int:
        self.valid = False
        return self.out.seek(*args)

    def truncate(self, *args: Any) -> int:
        self.valid = False
        return self.out.truncate(*args)

    def flush(self) -> None:
        self.out.flush()

    def hexdigest(self) -> str | None:
        return self.sha.hexdigest() if self.valid else None


def small_chunks() -> contextlib.AbstractContextManager[None]:
    """huggingface_hub's transfer chunk at CHUNK_BYTES while pulls run (see the module docstring)."""
    return _SMALL_CHUNKS()


class SpeedMeter:
    """Bytes a second, smoothed (an exponential average of each interval's rate), and the time left."""

    def __init__(self) -> None:
        self.speed = 0.0
        self.last: tuple[float, int] | None = None

    def tick(self, fetched: int) -> float:
        now = time.monotonic()
        if self.last is not None and now > self.last[0]:
            rate = max(fetched - self.last[1], 0) / (now - self.last[0])
            self.speed = rate if self.speed == 0 else 0.7 * self.speed + 0.3 * rate
        self.last = (now, fetched)
        return self.speed

    def eta(self, left: int) -> float:
        return left / self.speed if self.speed > 0 else (0.0 if left <= 0 else -1.0)


def relay_progress(transfer: Transfer, thread: threading.Thread) -> Iterator[DownloadProgress]:
    """DownloadProgress while the thread runs (at most EVENTS_PER_S a second, and one at the end); returns early
    on a cancel, once the thread has stopped or STOP_WAIT_S has passed."""
    meter = SpeedMeter()
    meter.tick(0)
    while thread.is_alive():
        thread.join(1 / EVENTS_PER_S)
        if transfer.stop.is_set():
            thread.join(STOP_WAIT_S)
            return
        yield progress_event(transfer, meter)
    yield progress_event(transfer, meter)


def progress_event(transfer: Transfer, meter: SpeedMeter) -> DownloadProgress:
    plan = transfer.plan
    done = min(plan.have + transfer.fetched, plan.total)
    speed = meter.tick(transfer.fetched)
    return DownloadProgress(plan.repo_id, transfer.file, done, plan.total, speed, meter.eta(plan.total - done))


# --- the pull -----------------------------------------------------------------------------------------------------

def pull(repo_id: str, patterns: list[str] | None = None, *, revision: str | None = None,
         controls: Controls | None = None) -> Iterator[Event]:
    """Fetch the files `patterns` select (None: the safetensors set) into the Hugging Face cache. Yields
    DownloadProgress, then DownloadFinished (verified against the Hub's hashes) or DownloadCancelled.
    Raises the errors of `plan_pull` before any byte moves, and ConnectionLost / NotEnoughDisk during the transfer
    (what was fetched stays: pulling again resumes)."""
    controls = controls or Controls()
    plan = plan_pull(repo_id, patterns, revision)
    transfer = Transfer(plan, controls.stop)
    thread = threading.Thread(target=transfer.run, name="azr-hub-download", daemon=True)
    with online(), small_chunks():
        thread.start()
        try:
            yield from relay_progress(transfer, thread)
        except GeneratorExit:  # the consumer went away: the transfer stops at its next chunk
            transfer.abandoned = True
            raise
        if not controls.stop.is_set():
            thread.join()
    if controls.stop.is_set() and not transfer.finished:
        now = sum(bytes_in_cache(plan, name, size) for name, size in plan.files)
        yield DownloadCancelled(repo_id, now, plan.total)
        return
    if transfer.error is not None:
        raise hub_error(transfer.error, repo_id, done=plan.have + transfer.fetched, total=plan.total,
                        folder=plan.cache_dir) from None
    verify(plan, transfer.sums)
    yield DownloadFinished(repo_id, str(result_path(plan)), [name for name, _ in plan.files], True,
                           transfer.fetched)


def result_path(plan: PullPlan) -> Path:
    """The snapshot folder, or the .gguf file when the pull was one GGUF file (what the app's loaders open)."""
    ggufs = [name for name, _ in plan.files if name.lower().endswith(".gguf")]
    weights = [name for name, _ in plan.files if name.endswith(".safetensors")]
    if len(ggufs) == 1 and not weights:
        return plan.snapshot / ggufs[0]
    return plan.snapshot


def verify(plan: PullPlan, sums: dict[str, str] | None = None) -> None:
    """Every pulled file against the Hub's hash (`sums`: sha256 already computed while writing); a damaged one is
    deleted (blob and link) and told as a UserError."""
    from huggingface_hub.utils.sha import git_hash, sha_fileobj

    for name, _ in plan.files:
        path = plan.snapshot / name
        expected = plan.hashes[name]
        if len(expected) != 64:  # a small file kept in git: its blob id
            actual = git_hash(path.read_bytes())
        elif sums and name in sums:
            actual = sums[name]
        else:  # LFS, already in the cache before this pull: sha256 of the content
            with path.open("rb") as f:
                actual = sha_fileobj(f).hex()
        if actual != expected:
            blob = path.resolve()
            path.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)
            raise UserError(f"{name} of {plan.repo_id} arrived damaged (it does not match the Hub's hash) and was "
                            "deleted: pull again")


def pull_all(requests: list[tuple[str, list[str] | None]], controls: Controls | None = None) -> Iterator[Event]:
    """Several pulls one after another (a queue): a failing one yields Log(level "error") and the rest go on; a
    cancel ends the queue."""
    controls = controls or Controls()
    for repo_id, patterns in requests:
        if controls.stop.is_set():
            return
        try:
            yield from pull(repo_id, patterns, controls=controls)
        except UserError as exc:
            yield Log("error", f"{repo_id}: {exc}")
