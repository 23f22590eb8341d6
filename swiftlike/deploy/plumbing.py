"""The HTTP plumbing both of our API servers share (`swiftlike deploy`'s OpenAI server and the `swiftlike rollout`
server): one error shape, the API key check, request-body limits, the exception -> status mapping and `/health`.

Written once so that the two servers answer bad input alike (a 4xx naming what is wrong, and the server keeps
serving) and a fix to one reaches both. FastAPI provides the hooks (middleware, exception handlers); the policy
is ours, so it is here rather than in a library. The browser-facing pages (web UI, app) add the Host-header check
of `hosts.py` on top.
"""
from __future__ import annotations

import hmac
import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 409: "conflict_error", 413: "request_too_large"}


def error_response(status: int, message: str) -> JSONResponse:
    """OpenAI's error body (`error.message`, `type`, `param`, `code`), which the `openai` client turns into
    its exception classes, for every route of every server."""
    kind = "server_error" if status >= 500 else ERROR_TYPES.get(status, "invalid_request_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}},
                        status_code=status)


def body_problems(exc: RequestValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])


def install(app: FastAPI, *, api_key: str | None, logger: logging.Logger,
            guarded: Callable[[str], bool] = lambda path: path != "/health",
            body_limit: Callable[[str], int | None] = lambda path: None,
            errors: dict[type[Exception], int] | None = None,
            validation_hint: Callable[[RequestValidationError], str] = lambda exc: "",
            health: Callable[[], dict] = dict) -> None:
    """Add the shared plumbing to `app`.

    guarded: the paths that need `Authorization: Bearer <api_key>` (when a key is set).
    body_limit: the largest body a path takes, in bytes (None: no limit here), refused from Content-Length
        before the body is read.
    errors: exception classes of the server's own, each with its status; ValueError is 400 and anything else
        500 (logged with its traceback), after them.
    health: extra fields of `GET /health`, beside `"status": "ok"`.
    """
    @app.middleware("http")
    async def guard(request: Request, call_next):
        path = request.url.path
        if api_key and guarded(path):
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {api_key}".encode()):
                return error_response(401, "missing or wrong API key: send `Authorization: Bearer <--api_key>`")
        limit = body_limit(path)
        length = request.headers.get("content-length")
        if limit is not None and length is not None and length.isdigit() and int(length) > limit:
            return error_response(413, f"request body of {int(length) >> 20} MiB exceeds this endpoint's limit of "
                                       f"{limit >> 20} MiB (--max_bucket_mb for weight buckets); send smaller ones")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError):
        return error_response(422, f"invalid request body for {request.url.path}: {body_problems(exc)}"
                                   f"{validation_hint(exc)}")

    for exc_class, status in (errors or {}).items():
        app.add_exception_handler(exc_class, lambda request, exc, status=status: error_response(status, str(exc)))

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, exc: ValueError):
        return error_response(400, str(exc))

    @app.exception_handler(Exception)
    async def server_fault(request: Request, exc: Exception):
        logger.exception("%s failed", request.url.path)
        return error_response(500, f"{type(exc).__name__}: {exc}")

    @app.get("/health")
    async def health_route():
        return {"status": "ok", **health()}
