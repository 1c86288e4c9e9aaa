"""What can go wrong between this machine and the Hugging Face Hub, each said as one sentence with what to do.

`hub_error` turns huggingface_hub's and httpx's exceptions into these, so the window, the CLI and the server show
the same words. Every class is a UserError: shown as one line, never a traceback.
"""

from __future__ import annotations

import errno
from pathlib import Path

from desktop_app.engine.errors import UserError
from desktop_app.engine.os_faults import size_text

HUB_URL = "https://huggingface.co"
SETTING_NAME = "the Network features box of Library > Get a model, or `models network on`"


class NetworkOff(UserError):
    """The person turned network features off (the app's setting, or AZR_NETWORK=off in the environment)."""

    def __init__(self, by_environment: bool = False) -> None:
        self.by_environment = by_environment
        if by_environment:
            super().__init__("network features are off (AZR_NETWORK=off in the environment); unset it to search or "
                             "download")
        else:
            super().__init__(f"network features are off (the app's setting, {SETTING_NAME}); turn them on to search "
                             "or download")


class RepoMissing(UserError):
    def __init__(self, repo_id: str) -> None:
        self.repo_id = repo_id
        super().__init__(f"no model {repo_id} on the Hugging Face Hub: check the name")


class RepoGated(UserError):
    def __init__(self, repo_id: str) -> None:
        self.repo_id = repo_id
        super().__init__(f"{repo_id} is gated: accept its licence at {HUB_URL}/{repo_id}, then log in with "
                         "`hf auth login` (your token stays in huggingface_hub's own store)")


class ConnectionLost(UserError):
    """The Hub stopped answering: mid-download (what was fetched stays), or it could not be reached at all."""

    def __init__(self, done: int = 0, total: int = 0, *, repo_id: str = "", cause: str = "") -> None:
        self.done, self.total = done, total
        if total:
            super().__init__(f"the connection to the Hub was lost after {size_text(done)} of {size_text(total)}; "
                             "pull again to resume from there")
        else:
            about = f" for {repo_id}" if repo_id else ""
            why = f" ({cause})" if cause else ""
            super().__init__(f"could not reach the Hugging Face Hub{about}{why}: check the connection, then try "
                             "again")


class NotEnoughDisk(UserError):
    """The cache's disk cannot take the files: too little free space, or (file_too_big) a file larger than its file
    system or a file-size limit allows (EFBIG: FAT32 holds at most 4 GB per file)."""

    def __init__(self, repo_id: str, needed: int, free: int, folder: Path, *, file_too_big: bool = False) -> None:
        self.repo_id, self.needed, self.free, self.folder = repo_id, needed, free, folder
        if file_too_big:
            super().__init__(f"{repo_id} has a file larger than {folder} can hold (its file system or a file-size "
                             f"limit refuses it, {size_text(needed)} still to write): move the Hugging Face cache "
                             "(HF_HOME) to another disk or choose a smaller file")
        else:
            super().__init__(f"{repo_id} needs {size_text(needed)} more but only {size_text(free)} is free in "
                             f"{folder}: free space or choose a smaller file")


class NoMatchingFiles(UserError):
    def __init__(self, repo_id: str, patterns: list[str] | None, gguf_files: list[str]) -> None:
        self.repo_id, self.patterns, self.gguf_files = repo_id, patterns, gguf_files
        listing = f"; its GGUF files are: {', '.join(gguf_files)}" if gguf_files else \
            "; it has no GGUF files either"
        if patterns is None:
            super().__init__(f"{repo_id} has no safetensors weights to pull: choose one GGUF file with "
                             f"--file '*Q4_K_M.gguf'{listing}")
        else:
            wanted = " ".join(f"'{p}'" for p in patterns)
            super().__init__(f"--file {wanted} matches no file of {repo_id}{listing}")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def hub_error(exc: BaseException, repo_id: str, *, done: int = 0, total: int = 0, folder: Path | None = None) \
        -> UserError:
    """The sentence for an exception met while talking to the Hub about `repo_id` (done/total: bytes so far)."""
    import httpx2
    from huggingface_hub import errors as hf

    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, hf.GatedRepoError):  # a subclass of RepositoryNotFoundError: first
        return RepoGated(repo_id)
    if isinstance(exc, hf.RepositoryNotFoundError):
        return RepoMissing(repo_id)
    if isinstance(exc, hf.RevisionNotFoundError):
        return UserError(f"{repo_id} has no such revision: leave the revision out to get its newest files")
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return UserError(f"a file of {repo_id} is gone from the Hub (the repository changed): search again")
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return UserError("huggingface_hub is in offline mode (HF_HUB_OFFLINE=1): unset it, or use the app's "
                         "network setting")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return disk_full(repo_id, total - done, folder, file_too_big=exc.errno == errno.EFBIG)
    lost = (httpx2.TransportError, hf.LocalEntryNotFoundError, ConnectionError, TimeoutError)
    if isinstance(exc, lost) or (isinstance(exc, OSError) and "Consistency check failed" in str(exc)):
        return ConnectionLost(done, total, repo_id=repo_id, cause=first_line(exc))
    if isinstance(exc, hf.HfHubHTTPError):
        return UserError(f"the Hub answered with an error for {repo_id} ({first_line(exc)}); try again later")
    return UserError(f"could not reach {repo_id} on the Hugging Face Hub ({type(exc).__name__}: "
                     f"{first_line(exc)}); check the connection and pull again")


def disk_full(repo_id: str, missing: int, folder: Path | None, *, file_too_big: bool = False) -> NotEnoughDisk:
    """The disk filled up (or a file-size limit was hit) mid-download: what is still missing and what is free."""
    import shutil

    where = folder or Path(".")
    try:
        free = shutil.disk_usage(existing_parent(where)).free
    except OSError:
        free = 0
    return NotEnoughDisk(repo_id, max(missing, 0), free, where, file_too_big=file_too_big)


def existing_parent(path: Path) -> Path:
    """The nearest folder of `path` that exists (the cache may not be made yet)."""
    path = Path(path).expanduser()
    while not path.exists() and path.parent != path:
        path = path.parent
    return path
