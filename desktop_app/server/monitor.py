"""The request log and the number of requests in flight ("clients"), for the CLI's log and the window.

An ASGI middleware (not BaseHTTPMiddleware, which would buffer streams and swallow cancellation) counts
each HTTP request from its start to the end of its response (a stream ends when its last chunk is
sent or the client goes away) and tells listeners: {"event": "start" | "end", "method", "path",
"status", "ms", "clients"}; a request that failed (status 400 or more) also carries "error", the reason the
response gave its client (a log line "404" alone says nothing). Listeners run on the event loop and must be quick.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

Listener = Callable[[dict[str, Any]], None]


class Monitor:
    def __init__(self, keep: int = 200):
        self.in_flight = 0
        self.total = 0
        self.recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self.listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        self.listeners.append(listener)

    def emit(self, record: dict[str, Any]) -> None:
        if record["event"] == "end":
            self.recent.append(record)
        for listener in list(self.listeners):
            try:
                listener(record)
            except Exception:  # a broken listener must not break requests
                log.exception("request log listener failed")


class MonitorMiddleware:
    def __init__(self, app: ASGIApp, monitor: Monitor):
        self.app, self.monitor = app, monitor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        m = self.monitor
        m.in_flight += 1
        m.total += 1
        base = {"method": scope["method"], "path": scope["path"]}
        m.emit({"event": "start", **base, "clients": m.in_flight})
        status = 0
        error = ""
        t0 = time.perf_counter()

        async def tracking_send(message: Message) -> None:
            nonlocal status, error
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and status >= 400 and not error:
                error = error_reason(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            m.in_flight -= 1
            m.emit({"event": "end", **base, "status": status or 499, "ms": round((time.perf_counter() - t0) * 1e3, 1),
                    "clients": m.in_flight, **({"error": error} if error else {})})


def error_reason(body: bytes, limit: int = 300) -> str:
    """The message of an error response's body: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, else ""."""
    try:
        data = json.loads(body[:65536])
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(data, dict):
        return ""
    inner = data.get("error")
    message = inner.get("message") if isinstance(inner, dict) else data.get("detail")
    return str(message)[:limit] if isinstance(message, str) else ""
