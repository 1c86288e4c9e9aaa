"""Every error leaves the server in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.

Official clients read `error.message` and map the HTTP status to an exception class (400
BadRequestError, 401 AuthenticationError, 404 NotFoundError, 413/422 APIStatusError, 429
RateLimitError, 5xx InternalServerError), so the status code matters as much as the body.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from desktop_app.engine.errors import UserError

log = logging.getLogger(__name__)

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
          404: "invalid_request_error", 405: "invalid_request_error", 409: "invalid_request_error",
          413: "invalid_request_error", 415: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error", 503: "server_error"}


class ApiError(Exception):
    """An error response: HTTP status, a message a person reads, and OpenAI's type/param/code fields."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "server_error")
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code, **self.extra)


def error_body(message: str, *, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}, **extra}


def error_response(status: int, message: str, **fields: Any) -> JSONResponse:
    return JSONResponse(ApiError(status, message, **fields).body(), status_code=status)


def _field_path(loc: tuple[Any, ...]) -> str:
    # ("body", "messages", 0, "content") -> "messages[0].content"
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})", None
    param = _field_path(tuple(first.get("loc", ())))
    if first.get("type") == "missing":
        return f"missing required parameter '{param}'", param or None
    parts = [f"'{_field_path(tuple(e.get('loc', ())))}': {e.get('msg', 'invalid')}" for e in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "invalid parameter " + "; ".join(parts) + more, param or None


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure (ours, FastAPI's validation, Starlette's 404/405, the unexpected) to the shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(UserError)
    async def _user_error(request: Request, exc: UserError) -> JSONResponse:
        return error_response(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(400, message, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        return JSONResponse(error_body(message, type=_TYPES.get(exc.status_code, "server_error")),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error in %s %s", request.method, request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}: {str(exc)[:300]}", type="server_error")
