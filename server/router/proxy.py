"""Forward one request to a worker: hold while none is ready, retry elsewhere on failure.

Bodies pass through as bytes in both directions (JSON or msgpack, never re-encoded).
The request body is kept so it can be re-sent, and the worker's answer is read whole
before the router answers: a worker that dies while sending its answer then costs a
retry on another worker instead of a truncated answer (requests are idempotent).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ..deadline_header import deadline_ms as read_deadline_ms
from ..request_ids import fresh_hex
from .config import RouterConfig
from .errors import error_response
from .metrics import RouterMetrics
from .registry import WorkerRegistry
from .worker import Worker

log = logging.getLogger("sie_server.router")

# Request headers that mean something to a worker; X-SIE-Pool is the router's own.
# Content-Encoding: a compressed body is forwarded as sent (bodies.py) and the worker inflates it.
_FORWARD_REQUEST = ("Content-Type", "Content-Encoding", "Accept", "Accept-Encoding", "Authorization")
# Hop-by-hop or recomputed by aiohttp when the router answers.
_DROP_RESPONSE = frozenset(
    h.lower() for h in ("Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length",
                        "Date", "Server")
)
# The model label of requests for a model no worker reports.
OTHER_MODEL = "other"
# While held, re-check at least this often: a 429 back-off may end without any poll.
_HOLD_RECHECK_S = 0.25


@dataclass
class UpstreamAnswer:
    status: int
    headers: CIMultiDict
    body: bytes


class AttemptFailed(Exception):
    """The worker could not answer (connection refused, died mid-request, timed out)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def _error_code(answer: UpstreamAnswer) -> str:
    if "json" not in answer.headers.get("Content-Type", ""):
        return ""
    try:
        return str(json.loads(answer.body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def _retry_after(headers: CIMultiDict, default: float) -> float:
    try:
        return max(0.0, float(headers.get("Retry-After", default)))
    except ValueError:
        return default


class Forwarder:
    def __init__(self, config: RouterConfig, registry: WorkerRegistry, metrics: RouterMetrics,
                 session: aiohttp.ClientSession):
        self.config = config
        self.registry = registry
        self.metrics = metrics
        self.session = session

    async def handle(self, request: web.Request, pool: str | None, model: str | None,
                     body: bytes) -> web.StreamResponse:
        start = time.monotonic()
        pool_label = pool or "*"
        request_id = request.headers.get("X-Request-Id") or fresh_hex()
        response = await self._route(request, pool, model, body, start, request_id)
        response.headers["X-Request-Id"] = request_id
        self.metrics.requests.labels(pool_label, self.model_label(model), str(response.status)).inc()
        self.metrics.request_duration.labels(pool_label).observe(time.monotonic() - start)
        return response

    def model_label(self, model: str | None) -> str:
        """The metrics' model label: a model some worker reports, else `OTHER_MODEL`, so junk
        model ids cannot grow the label set (5,000 made 10,000 series, issue #30.6)."""
        if not model:
            return ""
        return model if self.registry.reported(model) else OTHER_MODEL

    async def _route(self, request: web.Request, pool: str | None, model: str | None,
                     body: bytes, start: float, request_id: str) -> web.StreamResponse:
        deadline_ms = read_deadline_ms(request)  # 400 for NaN, 0 or less, as the engine says
        hold_until = start + self.config.hold_timeout_s
        if deadline_ms is not None:
            hold_until = min(hold_until, start + deadline_ms / 1000.0)
        pool_label = pool or "*"
        queued_s = 0.0
        attempts = 0
        refused_by: set[str] = set()  # workers that refused this request for a reason of their own
        last_answer: UpstreamAnswer | None = None
        last_failure = ""
        while True:
            worker = self.registry.choose(pool, model, frozenset(refused_by))
            if worker is None and refused_by and last_answer is not None:
                # Every ready worker refused it (e.g. model_load_failed): pass that on.
                return self._answer(last_answer, None, queued_s)
            if worker is None:
                held_from = time.monotonic()
                worker = await self._hold(pool, model, hold_until, frozenset(refused_by))
                queued_s += time.monotonic() - held_from
            if worker is None:
                self.metrics.queue_seconds.labels(pool_label).observe(queued_s)
                return self._no_worker(pool_label, start, deadline_ms, last_failure)
            if attempts == 0:
                self.metrics.queue_seconds.labels(pool_label).observe(queued_s)
            else:
                self.metrics.retries.labels(pool_label).inc()
            attempts += 1

            headers = self._upstream_headers(request, request_id, start, deadline_ms)
            if headers is None:
                return error_response(504, "deadline_exceeded",
                                      "the request's X-SIE-Timeout-Ms passed at the router")
            try:
                answer = await self._attempt(worker, request, model, body, headers)
            except AttemptFailed as exc:
                self.metrics.upstream_errors.labels(worker.url, exc.kind).inc()
                last_failure = f"{worker.url} {exc}"
                if exc.kind == "timeout":
                    return error_response(
                        504, "deadline_exceeded",
                        f"worker {worker.url} did not answer within "
                        f"{self.config.upstream_timeout_s:g}s")
                log.warning("request %s: %s; retrying elsewhere", request_id, last_failure)
                worker.mark_down()
                self.registry.notify()
                if attempts >= self.config.max_attempts:
                    return error_response(
                        503, "no_worker",
                        f"{attempts} upstream attempts failed (last: {last_failure}); retry later",
                        retry_after_s=self.config.retry_after_s)
                continue

            retry = self._judge(worker, model, answer, refused_by)
            if retry is None:
                return self._answer(answer, worker, queued_s)
            last_answer, last_failure = answer, f"{worker.url} answered {answer.status} {retry}"
            self.metrics.upstream_errors.labels(worker.url, retry).inc()
            if attempts >= self.config.max_attempts:
                return self._answer(answer, worker, queued_s)

    def _no_worker(self, pool_label: str, start: float, deadline_ms: float | None,
                   last_failure: str) -> web.Response:
        """The answer to a request no worker became ready for while it was held."""
        if deadline_ms is not None and time.monotonic() >= start + deadline_ms / 1000.0:
            return error_response(504, "deadline_exceeded",
                                  "the request's X-SIE-Timeout-Ms passed before a worker was ready")
        why = f" (last upstream problem: {last_failure})" if last_failure else ""
        return error_response(
            503, "no_worker",
            f"no worker of pool '{pool_label}' became ready within "
            f"{self.config.hold_timeout_s:g}s{why}; retry later",
            retry_after_s=self.config.retry_after_s)

    def _judge(self, worker: Worker, model: str | None, answer: UpstreamAnswer,
               refused_by: set[str]) -> str | None:
        """None if the answer is final; else the upstream-error kind, after marking the worker."""
        if answer.status == 429:
            worker.mark_busy(min(_retry_after(answer.headers, 1.0), self.config.hold_timeout_s))
            return "overloaded"
        if answer.status != 503:
            return None
        code = _error_code(answer)
        if code in ("not_ready", "draining", ""):
            # Out of rotation until a status poll says it is ready again.
            worker.ready = False
            return code or "unavailable"
        # e.g. model_load_failed: this worker cannot serve this model; others may.
        if model:
            worker.assigned.pop(model, None)
        refused_by.add(worker.url)
        return code

    async def _hold(self, pool: str | None, model: str | None, until: float,
                    exclude: frozenset[str]) -> Worker | None:
        """Wait for a ready worker while exporting the demand (KEDA scales from zero on it)."""
        gauge = self.metrics.pending.labels(pool or "*", self.model_label(model))
        gauge.inc()
        self.registry.holding += 1
        try:
            while True:
                worker = self.registry.choose(pool, model, exclude)
                if worker is not None:
                    return worker
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return None
                await self.registry.wait_for_change(min(remaining, _HOLD_RECHECK_S))
        finally:
            self.registry.holding -= 1
            gauge.dec()

    def _upstream_headers(self, request: web.Request, request_id: str, start: float,
                          deadline_ms: float | None) -> dict[str, str] | None:
        headers = {h: request.headers[h] for h in _FORWARD_REQUEST if h in request.headers}
        headers["X-Request-Id"] = request_id
        if deadline_ms is not None:
            # The worker's deadline is what is left after the time spent here.
            left = deadline_ms - (time.monotonic() - start) * 1000.0
            if left <= 0:
                return None
            headers["X-SIE-Timeout-Ms"] = f"{left:.0f}"
        return headers

    async def _attempt(self, worker: Worker, request: web.Request, model: str | None,
                       body: bytes, headers: dict[str, str]) -> UpstreamAnswer:
        worker.inflight += 1
        if model:
            worker.assigned[model] = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=self.config.upstream_timeout_s,
                                        sock_connect=self.config.connect_timeout_s)
        try:
            async with self.session.request(
                # the raw path: a decoded one would turn `%23query` (a mode alias) into a fragment
                request.method, worker.url + request.rel_url.raw_path_qs,
                data=body if body else None, headers=headers, timeout=timeout,
            ) as resp:
                data = await resp.read()
                return UpstreamAnswer(resp.status, CIMultiDict(resp.headers), data)
        except aiohttp.ConnectionTimeoutError as exc:
            raise AttemptFailed("connect", repr(exc)) from exc
        except aiohttp.ClientConnectorError as exc:
            raise AttemptFailed("connect", repr(exc)) from exc
        except asyncio.TimeoutError as exc:  # includes aiohttp's SocketTimeoutError
            raise AttemptFailed("timeout", repr(exc)) from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            # Died mid-request: a reset, a disconnect, a truncated answer.
            raise AttemptFailed("disconnect", repr(exc)) from exc
        finally:
            worker.inflight -= 1

    def _answer(self, answer: UpstreamAnswer, worker: Worker | None,
                queued_s: float) -> web.Response:
        headers = CIMultiDict(
            (k, v) for k, v in answer.headers.items() if k.lower() not in _DROP_RESPONSE
        )
        if worker is not None:
            headers["X-SIE-Worker"] = worker.url
        headers["X-SIE-Router-Queue-Ms"] = f"{queued_s * 1000.0:.3f}"
        return web.Response(status=answer.status, body=answer.body, headers=headers)
