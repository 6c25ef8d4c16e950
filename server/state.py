"""Typed application state (`web.AppKey`s) and the server's lifecycle flags."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from aiohttp import web

from sie_engine import Engine

from .auth import ApiKeys
from .metrics import ServerMetrics
from sie_engine.types import Timings

from .settings import ServerSettings


@dataclass
class Lifecycle:
    """Readiness and drain state. `inflight` counts work requests (every task's route
    and embeddings) that passed admission and have not been answered; a drain waits
    for it to reach zero."""

    started_at: float = field(default_factory=time.time)
    ready: bool = False
    draining: bool = False
    preload_error: str | None = None
    inflight: int = 0
    _idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self):
        self._idle.set()

    def enter(self) -> None:
        self.inflight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """True once no accepted request is left; False if `timeout` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False


ENGINE = web.AppKey("engine", Engine)
SETTINGS = web.AppKey("settings", ServerSettings)
METRICS = web.AppKey("metrics", ServerMetrics)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
API_KEYS = web.AppKey("api_keys", ApiKeys)
# the registered tasks when the app was made: their routes, OpenAPI paths and work-route names
TASKS = web.AppKey("tasks", tuple)
# routes that run models: counted in flight, refused while draining (every task's, and OpenAI's)
WORK_ROUTES = web.AppKey("work_routes", frozenset)

# Per-request values the handlers leave for the middleware (typed keys where this
# aiohttp has them, plain strings before 3.13).
_RequestKey = getattr(web, "RequestKey", None)
MODEL_LABEL = _RequestKey("sie_model", str) if _RequestKey else "sie_model"  # metrics label: a served model id
TIMINGS = _RequestKey("sie_timings", Timings) if _RequestKey else "sie_timings"  # the engine's phase timings
ERROR_CODE = _RequestKey("sie_error", str) if _RequestKey else "sie_error"  # the error code answered
