"""Typed application state (`web.AppKey`s) and the server's lifecycle flags."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sie_engine.types import Timings

from .auth import ApiKeys
from .metrics import ServerMetrics
from .settings import ServerSettings

if TYPE_CHECKING:  # the engine's modules import torch; a split server's frontends never load them
    from sie_engine import Engine

# How often a drain looks again at the requests it waits for (a body finishing arrives
# without an event to wait on).
DRAIN_POLL_S = 0.05


@dataclass
class Lifecycle:
    """Readiness and drain state. `inflight` counts work requests (every task's route
    and embeddings) that passed admission and have not been answered. A drain waits for
    those whose body has fully arrived: a client that sent part of a body and stopped has
    asked for nothing yet, and must not hold a shutdown (issue #19)."""

    started_at: float = field(default_factory=time.time)
    ready: bool = False
    draining: bool = False
    preload_error: str | None = None
    _requests: dict = field(default_factory=dict)  # id -> web.Request (a Request is not hashable)

    @property
    def inflight(self) -> int:
        return len(self._requests)

    def enter(self, request: web.Request) -> None:
        self._requests[id(request)] = request

    def leave(self, request: web.Request) -> None:
        self._requests.pop(id(request), None)

    def waiting_for_body(self) -> list[web.Request]:
        """Requests whose body has not fully arrived."""
        return [r for r in self._requests.values() if not _body_arrived(r)]

    def accepted(self) -> int:
        """Requests with their whole body, not answered yet: what a drain waits for."""
        return sum(1 for r in self._requests.values() if _body_arrived(r))

    async def wait_idle(self, timeout: float) -> bool:
        """True once every accepted request is answered; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        while self.accepted():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(DRAIN_POLL_S, left))
        return True


def _body_arrived(request: web.Request) -> bool:
    """Whether the request's whole body has been received (read by the handler or not)."""
    return request.content.is_eof()


@dataclass
class AdminState:
    """The admin API's (admin.py): the runtime cards and their changes, and the admin keys."""

    cards: Any  # card_admin.CardAdmin, or a split frontend's CoreCardAdmin (imported there: this module stays light)
    keys: ApiKeys


# an Engine, or in a split server's frontend its EngineClient (server/split/client.py)
ENGINE: web.AppKey[Engine] = web.AppKey("engine")
ADMIN = web.AppKey("admin", AdminState)
SETTINGS = web.AppKey("settings", ServerSettings)
METRICS = web.AppKey("metrics", ServerMetrics)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
API_KEYS = web.AppKey("api_keys", ApiKeys)
# the registered tasks when the app was made: their routes, OpenAPI paths and work-route names
TASKS = web.AppKey("tasks", tuple)
# routes that run models: counted in flight, refused while draining (every task's, and OpenAI's)
WORK_ROUTES = web.AppKey("work_routes", frozenset)
# queue mode (made by create_app): the secret the engine's own queue consumer sends (in
# QUEUE_TAKEN_HEADER) with a message it took from the stream: accepted work, served also while draining
QUEUE_TOKEN = web.AppKey("queue_token", str)
QUEUE_TAKEN_HEADER = "X-SIE-Queue-Taken"

# Per-request values the handlers leave for the middleware (typed keys where this
# aiohttp has them, plain strings before 3.13).
_RequestKey = getattr(web, "RequestKey", None)
MODEL_LABEL = _RequestKey("sie_model", str) if _RequestKey else "sie_model"  # metrics label: a served model id
TIMINGS = _RequestKey("sie_timings", Timings) if _RequestKey else "sie_timings"  # the engine's phase timings
ERROR_CODE = _RequestKey("sie_error", str) if _RequestKey else "sie_error"  # the error code answered
# the engine's handle of a work request let in before its body was read (Engine.refuse_if_overloaded)
PRE_ADMITTED = _RequestKey("sie_pre_admitted", object) if _RequestKey else "sie_pre_admitted"  # a PreAdmitted
