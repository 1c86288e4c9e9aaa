"""Who may talk to the server and how much they may send.

- Loopback by default; any other address needs an API key (`check_bind`), because the API can read
  the workspace's models and start training runs for anyone who reaches the port.
- The key is a bearer token compared in constant time (hmac.compare_digest), so response timing does
  not leak how many leading characters of a guess were right.
- Request bodies are capped before they are read (Content-Length) and while they stream (chunked
  uploads), with a larger cap for dataset uploads than for JSON.
- Uploaded file names become plain names inside one folder: a name with a path in it is refused (it
  is either a bug or an attack), odd characters are replaced, and nothing is ever overwritten.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from collections.abc import Iterable
from pathlib import Path

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from desktop_app.engine.errors import UserError
from desktop_app.server.errors import ApiError, error_body

# Paths anyone on the allowed network may read without the key: the API's own documentation.
OPEN_PATHS = ("/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/health")

_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
MAX_NAME_CHARS = 120


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything, so treat it as reachable


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without an API key (UserError with what to do instead)."""
    if not host:
        raise UserError("--host is empty: give an address to listen on, e.g. 127.0.0.1")
    if not is_loopback(host) and not api_key:
        raise UserError(f"refusing to listen on {host} without an API key: anyone who can reach this machine "
                        "could use the model and start training runs. Add --api-key KEY (or set AZR_API_KEY), "
                        "or listen on 127.0.0.1 (the default)")


async def _send_json(send: Send, status: int, body: dict, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


class BearerAuth:
    """ASGI middleware: every request outside OPEN_PATHS needs `Authorization: Bearer <key>`."""

    def __init__(self, app: ASGIApp, api_key: str | None):
        self.app = app
        self.key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.key is None or scope["path"] in OPEN_PATHS or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization", "")
        scheme, _, token = header.partition(" ")
        # Compare even when the scheme is wrong, so both failures take the same time.
        ok = hmac.compare_digest(token.strip().encode(), self.key) and scheme.lower() == "bearer"
        if ok:
            await self.app(scope, receive, send)
            return
        message = ("invalid API key" if header else
                   "missing API key: this server needs 'Authorization: Bearer <key>' (the key given with --api-key)")
        await _send_json(send, 401, error_body(message, code="invalid_api_key"),
                         [(b"www-authenticate", b"Bearer")])


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(status_code=413, detail=f"the request body is larger than the server's limit of "
                                                 f"{_size(limit)}")


def _size(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


class BodyLimit:
    """ASGI middleware: 413 when a body is (declared or turns out) larger than its path's limit.

    The declared size is checked before the app runs; a body without Content-Length (chunked) is
    counted while the app reads it, and the app's error handler turns the overflow into a 413.
    """

    def __init__(self, app: ASGIApp, json_limit: int, upload_limit: int, upload_paths: tuple[str, ...]):
        self.app = app
        self.json_limit, self.upload_limit, self.upload_paths = json_limit, upload_limit, upload_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.upload_limit if scope["path"] in self.upload_paths else self.json_limit
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _send_json(send, 413, error_body(BodyTooLarge(limit).detail, code="request_too_large"))
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:  # raised where no handler caught it
            if started:
                raise
            await _send_json(send, 413, error_body(exc.detail, code="request_too_large"))


_UNSAFE_CHARS = re.compile(r"[^\w.\- ()+,@=]+")


def safe_upload_name(name: str | None) -> str:
    """A plain file name to store an upload under; ApiError(400) for names holding a path.

    Refused: empty names, any / or \\ (so no folders, no '..' traversal, no absolute POSIX or UNC
    paths), drive letters (C:), NUL, names starting with a dot. Replaced with '_': characters other
    than letters, digits and . - _ ( ) + , @ = and space. Reserved Windows device names get a '_'
    prefix; long names are cut, keeping the extension.
    """
    if not name or not name.strip():
        raise ApiError(400, "an uploaded file has no name", param="files", code="invalid_file_name")
    raw = name.strip()
    if "/" in raw or "\\" in raw or "\x00" in raw or re.match(r"^[A-Za-z]:", raw) or raw.startswith("."):
        raise ApiError(400, f"refused the file name {raw[:80]!r}: give a plain file name (no folders, no '..', "
                            "no absolute path, not starting with a dot)", param="files", code="invalid_file_name")
    clean = _UNSAFE_CHARS.sub("_", raw).strip(" ")
    stem, dot, ext = clean.rpartition(".")
    if not dot:
        stem, ext = clean, ""
    if stem.split(".")[0].upper() in _WINDOWS_RESERVED:
        stem = "_" + stem
    ext = ext[:16]
    stem = stem[: MAX_NAME_CHARS - len(ext) - 1] or "file"
    return f"{stem}.{ext}" if ext else stem


def unique_child(folder: Path, name: str) -> Path:
    """folder/name, or folder/name-2.ext ... when taken; always a direct child of folder."""
    candidate = folder / name
    stem, suffix = Path(name).stem, Path(name).suffix
    n = 2
    while candidate.exists():
        candidate = folder / f"{stem}-{n}{suffix}"
        n += 1
    if candidate.resolve().parent != folder.resolve():  # belt and braces: safe_upload_name already ensures it
        raise ApiError(400, f"refused the file name {name!r}", param="files", code="invalid_file_name")
    return candidate
