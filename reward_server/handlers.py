"""The app's exception handlers: what a client gets for a bad request, a full queue, a drain, or a bug.

Every answer is JSON that says why (a 422 names the field, a 429 and a 503 say when to retry), and none
carries a traceback: the log keeps it.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from reward_server.admission import QueueFull
from reward_server.jsonio import SafeJSONResponse
from reward_server.middleware import DRAIN_RETRY_AFTER_S, note_refused
from reward_server.routers.cancel import ClientGone, ServerStopping

logger = logging.getLogger("reward_server")


def _is_json(content_type: str | None) -> bool:
    """Whether a request's content type is one FastAPI parses as JSON (``application/json``, ``application/*+json``)."""
    media = (content_type or "").split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def install_handlers(app: FastAPI) -> None:
    """Register the server's exception handlers on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> SafeJSONResponse:
        # FastAPI's default shape, minus the echo of the whole input (which can be megabytes of text).
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        sent = request.headers.get("content-type")
        if not _is_json(sent) and any(tuple(e["loc"]) == ("body",) for e in errors):
            # FastAPI reads a body as JSON only when it says so: `curl -d` alone sends a form, and the 422 on
            # ["body"] would say nothing of why.
            why = f"the body was sent as {sent!r}" if sent else "the body was sent without a content type"
            errors = [
                {
                    "loc": ["body"],
                    "msg": f"{why}, not JSON: send the header 'content-type: application/json' (curl: -H "
                    "'content-type: application/json')",
                    "type": "content_type",
                }
            ]
        return SafeJSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI's own handler, but with a response that encodes any detail (it may quote the request).
        if exc.status_code in (204, 304) or exc.status_code < 200:
            return Response(status_code=exc.status_code, headers=exc.headers)
        return SafeJSONResponse(status_code=exc.status_code, content={"detail": exc.detail}, headers=exc.headers)

    @app.exception_handler(QueueFull)
    async def queue_full(request: Request, exc: QueueFull) -> SafeJSONResponse:
        # The batch is refused whole; Retry-After says when the queue should have room for it.
        note_refused(request.scope, "queue_full")
        return SafeJSONResponse(
            status_code=429, content={"detail": str(exc)}, headers={"Retry-After": str(exc.retry_after_s)}
        )

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        # Nobody is listening; 499 (nginx's "client closed request") keeps the metrics honest.
        return Response(status_code=499)

    @app.exception_handler(ServerStopping)
    async def server_stopping(request: Request, exc: ServerStopping) -> SafeJSONResponse:
        note_refused(request.scope, "drain_cancelled")
        return SafeJSONResponse(
            status_code=503,
            content={"detail": "the server shut down before this request was answered; retry on another server"},
            headers={"Retry-After": str(DRAIN_RETRY_AFTER_S), "Connection": "close"},
        )

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> SafeJSONResponse:
        # Never leak a traceback to a client; the log keeps it.
        logger.exception("unhandled error on %s", request.url.path)
        return SafeJSONResponse(status_code=500, content={"detail": f"internal error: {type(exc).__name__}"})
