"""The receiver's ASGI app: ``POST /alertmanager``, ``POST /grafana``, ``/healthz``, ``/readyz``, and the
OpenAPI document at FastAPI's default ``/openapi.json``.

A notification is read within ``webhook.max_body_bytes`` and ``webhook.read_timeout_s`` and authenticated
before anything parses it (:class:`_Guarded`), then validated by its pydantic model (422 naming the
field), then handed to the :class:`~switchyard.alerts.dispatch.Dispatcher`. The answers follow
Alertmanager's contract: 200 for everything handled (what each policy did), 4xx for what sending again
cannot fix, and 503 only when Temporal or ZooKeeper cannot be reached — Alertmanager's one cue to retry.
Every notification is counted by receiver and answer (``switchyard_webhook_notifications_total``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from fastapi import APIRouter, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from opentelemetry import metrics
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Message

from switchyard import __version__
from switchyard.alerts.auth import Authenticator, AuthFailed, Source
from switchyard.alerts.dispatch import UNAVAILABLE, Answer, Dispatcher, SagaPort
from switchyard.alerts.payloads import AlertmanagerNotification, GrafanaNotification
from switchyard.config import Config
from switchyard.errors import TemporalRefused

log = logging.getLogger(__name__)
_NOTIFICATIONS = metrics.get_meter("switchyard.webhook").create_counter(
    "switchyard.webhook.notifications",
    description="notifications received, by receiver (alertmanager, grafana) and answer (HTTP status)",
)


@dataclass(frozen=True)
class Receiver:
    """What the app serves with, built once at start-up (or by a test, with the sagas in memory)."""

    config: Config
    dispatcher: Dispatcher
    auth: Mapping[Source, Authenticator]
    """The configured receivers; one not configured answers 404."""
    sagas: SagaPort
    close: Callable[[], Awaitable[None]] | None = None
    clock: Callable[[], float] = time.time


class Problem(BaseModel):
    """Why the notification was not handled."""

    detail: str


def _problem(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description}


RECEIVER_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"description": "handled: what each policy did (started, already running, cooling down, ...)"},
    400: _problem("the body could not be read"),
    401: _problem("not authenticated: the reason names the header or check that failed"),
    404: _problem("this receiver is not configured"),
    408: _problem("the body did not arrive within webhook.read_timeout_s"),
    413: _problem("the body is larger than webhook.max_body_bytes"),
    415: _problem("the body is not declared as JSON (header Content-Type)"),
    500: _problem("Temporal refused the call (its namespace, a permission): a configuration to fix"),
    503: _problem("Temporal or ZooKeeper cannot be reached: send it again later"),
}


def create_app(receiver: Receiver) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if receiver.close is not None:
            await receiver.close()

    app = FastAPI(
        title="Switchyard alert webhooks",
        version=__version__,
        description="Alertmanager and Grafana notifications start and reject Switchyard's sagas.",
        lifespan=lifespan,
    )
    app.state.receiver = receiver

    async def unavailable(_request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "30"})

    for error in UNAVAILABLE:
        app.add_exception_handler(error, unavailable)

    async def refused(_request: Request, exc: Exception) -> Response:
        log.error("%s", exc)
        return JSONResponse({"detail": str(exc)}, status_code=500)

    app.add_exception_handler(TemporalRefused, refused)

    notifications = APIRouter(route_class=_Guarded, responses=RECEIVER_ANSWERS)

    @notifications.post("/alertmanager", name="alertmanager")
    async def alertmanager(payload: AlertmanagerNotification) -> Answer:
        """An Alertmanager ``webhook_configs`` notification (version 4), authenticated by bearer token or
        basic auth."""
        return await receiver.dispatcher.handle(payload.notification())

    @notifications.post("/grafana", name="grafana")
    async def grafana(payload: GrafanaNotification) -> Answer:
        """A Grafana alerting webhook notification (version 1), signed with HMAC-SHA256."""
        return await receiver.dispatcher.handle(payload.notification())

    app.include_router(notifications)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "up"}

    @app.get("/readyz", responses={503: _problem("Temporal cannot be reached")})
    async def readyz() -> dict[str, str]:
        """Temporal answers, so notifications can be handled."""
        await receiver.sagas.ready()
        return {"status": "ready"}

    return app


class _Guarded(APIRoute):
    """A receiver's route: the body is read within the limits and authenticated before FastAPI parses
    it, so an oversized or unauthenticated request is never parsed (FastAPI's documented custom
    route class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        source = cast(Source, self.name)

        async def guarded(request: Request) -> Response:
            try:
                response = await checked(request)
            except Exception as exc:  # answered by the app's exception handlers
                _NOTIFICATIONS.add(1, {"receiver": source, "answer": _status_of(exc)})
                raise
            _NOTIFICATIONS.add(1, {"receiver": source, "answer": str(response.status_code)})
            return response

        async def checked(request: Request) -> Response:
            receiver: Receiver = request.app.state.receiver
            auth = receiver.auth.get(source)
            if auth is None:
                raise HTTPException(404, f"webhook.{source} is not configured: this receiver takes nothing")
            body = await _read(request, receiver.config)
            try:
                auth.check(request.headers, body, receiver.clock())
            except AuthFailed as exc:
                sender = request.client.host if request.client else "?"
                log.warning("%s notification from %s refused: %s", source, sender, exc.reason)
                challenge = {"WWW-Authenticate": exc.challenge} if exc.challenge else None
                raise HTTPException(401, exc.reason, headers=challenge) from None
            media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
            if not re.fullmatch(r"application/([^/]+\+)?json", media_type):
                raise HTTPException(415, f"header Content-Type must be application/json, not {media_type!r}")
            return await handle(Request(request.scope, _replay(body)))

        return guarded


def _status_of(exc: BaseException) -> str:
    """The status the app's exception handlers will answer ``exc`` with."""
    if isinstance(exc, StarletteHTTPException):
        return str(exc.status_code)
    if isinstance(exc, RequestValidationError):
        return "422"
    if isinstance(exc, UNAVAILABLE):
        return "503"
    return "500"


async def _read(request: Request, config: Config) -> bytes:
    limit, timeout_s = config.webhook.max_body_bytes, config.webhook.read_timeout_s
    too_large = HTTPException(413, f"the body is larger than webhook.max_body_bytes ({limit} bytes)")
    declared = request.headers.get("content-length")
    if declared is not None:
        if not re.fullmatch(r"\s*[0-9]{1,18}\s*", declared):
            raise HTTPException(400, "header Content-Length is not a number")
        if int(declared) > limit:
            raise too_large
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        raise HTTPException(
            408, f"the body did not arrive within webhook.read_timeout_s ({timeout_s:g}s)"
        ) from None
    except ClientDisconnect:
        raise HTTPException(400, "the sender went away before the whole body arrived") from None
    return b"".join(chunks)


def _replay(body: bytes) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that hands FastAPI the body already read."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive
