"""The router's side of queue mode: publish each request to its pool's stream, await the answer.

Each request gets a key of its own (this router's id and a counter: a client's X-Request-Id may
repeat), which is its reply subject under the router's inbox and its `Nats-Msg-Id` (a publish
retried after a lost PubAck is stored once). One subscription on the inbox takes every reply:
"started" ends the hold, the answer resolves the request and forgets the key, so a second answer
to the same key (a redelivered message answered again after its first engine died between answer
and ack) finds nothing and is dropped: no client is answered twice.

Waits, as in direct mode: until an engine starts it, at most --hold-timeout (503 `no_worker`, with
Retry-After), then its answer, at most --upstream-timeout after the last start (504); with an
X-SIE-Timeout-Ms, never past that deadline (504 `deadline_exceeded`). What a router restart loses:
the answers to the requests it held (their clients see the connection close; the messages are
still worked on and acked, their answers go to an inbox nobody reads); what the stream holds is
not lost, and the next router publishes to the same streams.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..deadline_header import deadline_ms as read_deadline_ms
from ..request_ids import fresh_hex
from ..router.errors import error_response
from . import layout, wire

log = logging.getLogger("sie_server.router")


@dataclass
class Waiting:
    started: asyncio.Event = field(default_factory=asyncio.Event)
    answer: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    assembly: wire.Assembly = field(default_factory=wire.Assembly)
    started_at: float = 0.0
    worker: str = ""


class QueueForwarder:
    """`handle(request, pool, model, body)` as the direct Forwarder's, over the pool's stream."""

    def __init__(self, config, metrics, url: str, pools: list[str], queue_layout: layout.QueueLayout):
        self.config = config
        self.metrics = metrics
        self.url = url
        self.pools = [layout.check_pool(p) for p in pools]
        self.layout = queue_layout
        self.nc: Any = None  # nats.aio.client.Client once started (nats is imported only then)
        self.js: Any = None
        self.waiting: dict[str, Waiting] = {}
        self.prefix = ""
        self._count = itertools.count()
        self._router_id = uuid.uuid4().hex[:12]

    async def start(self) -> None:
        import nats

        self.nc = await nats.connect(self.url, name=f"sie-router {self._router_id}", max_reconnect_attempts=-1,
                                     allow_reconnect=True)
        self.js = self.nc.jetstream()
        await layout.ensure(self.js, self.pools, self.layout)
        self.prefix = f"_INBOX.sie-router-{self._router_id}"
        await self.nc.subscribe(self.prefix + ".*", cb=self._on_reply)
        log.info("queue mode: pools %s on %s (ack wait %gs, %d deliveries before the dead-letter stream)",
                 ", ".join(self.pools), self.url, self.layout.ack_wait_s, self.layout.max_deliver)

    async def close(self) -> None:
        for waiting in self.waiting.values():
            if not waiting.answer.done():
                waiting.answer.cancel()
        if self.nc is not None:
            await self.nc.close()

    @property
    def connected(self) -> bool:
        return self.nc is not None and self.nc.is_connected

    async def _on_reply(self, message) -> None:
        key = message.subject.rpartition(".")[2]
        waiting = self.waiting.get(key)
        headers = message.headers or {}
        if waiting is None:  # answered already (a redelivery's second answer) or given up on
            if headers.get(wire.EVENT) == wire.ANSWER and headers.get(wire.PART, "1/1").startswith("1/"):
                self.metrics.queue_late_answers.inc()
            return
        if headers.get(wire.EVENT) == wire.STARTED:
            waiting.started_at = time.monotonic()
            waiting.worker = headers.get(wire.WORKER, "")
            waiting.started.set()
            return
        answer = waiting.assembly.add(headers, message.data)
        if answer is not None and not waiting.answer.done():
            if not waiting.started.is_set():  # answered without a start: dead-lettered
                waiting.started_at = time.monotonic()
                waiting.started.set()
            waiting.answer.set_result(answer)

    async def handle(self, request: web.Request, pool: str | None, model: str | None,
                     body: bytes) -> web.StreamResponse:
        start = time.monotonic()
        pool = pool or (self.pools[0] if len(self.pools) == 1 else None)
        if pool is None:
            return error_response(400, "invalid_request",
                                  f"name a pool with X-SIE-Pool (one of {', '.join(self.pools)}) or start the "
                                  "router with --default-pool")
        request_id = request.headers.get("X-Request-Id") or fresh_hex()
        response = await self._route(request, pool, body, start, request_id)
        response.headers["X-Request-Id"] = request_id
        label = self._model_label(model)
        self.metrics.requests.labels(pool, label, str(response.status)).inc()
        self.metrics.request_duration.labels(pool).observe(time.monotonic() - start)
        return response

    def _model_label(self, model: str | None) -> str:
        # in queue mode the router knows no worker's models: a bounded label set all the same
        return "" if not model else "queued"

    async def _route(self, request: web.Request, pool: str, body: bytes, start: float,
                     request_id: str) -> web.Response:
        deadline_ms = read_deadline_ms(request)  # 400 for NaN, 0 or less, as direct mode says
        now_wall = time.time()
        hold_s = self.config.hold_timeout_s
        deadline_s = deadline_ms / 1000.0 if deadline_ms is not None else None
        if deadline_s is not None:
            hold_s = min(hold_s, deadline_s)
        if self.js is None or not self.connected:
            return error_response(503, "queue_unavailable", "no connection to the NATS server (--queue) yet; retry "
                                  "later", retry_after_s=self.config.retry_after_s)
        limit = self.nc.max_payload
        if len(body) + wire.HEADER_ROOM > limit:
            return error_response(413, "payload_too_large",
                                  f"request body of {len(body)} bytes; queue mode carries at most "
                                  f"{max(0, limit - wire.HEADER_ROOM)} (the NATS server's max_payload, less room "
                                  "for headers): split the items over several requests")
        key = f"{next(self._count)}x{fresh_hex()[:8]}"
        reply = f"{self.prefix}.{key}"
        headers = {h: request.headers[h] for h in wire.FORWARDED if h in request.headers}
        headers.update({wire.REPLY: reply, wire.METHOD: request.method, wire.PATH: request.rel_url.raw_path_qs,
                        wire.START_BY: f"{now_wall + hold_s:.3f}", "X-Request-Id": request_id})
        if deadline_s is not None:
            headers[wire.DEADLINE] = f"{now_wall + deadline_s:.3f}"
        waiting = Waiting()
        self.waiting[key] = waiting
        gauge = self.metrics.pending.labels(pool, "")
        gauge.inc()
        try:
            try:
                await self.js.publish(layout.subject(pool), body, headers={**headers, wire.MSG_ID: key},
                                      timeout=min(5.0, hold_s), msg_ttl=max(1, math.ceil(hold_s)))
            except Exception as exc:  # NATS down or the stream full: nothing was queued
                log.warning("request %s: publish to pool %s failed: %s", request_id, pool, exc)
                return error_response(503, "queue_unavailable",
                                      f"the work queue cannot take requests now ({type(exc).__name__}); retry later",
                                      retry_after_s=self.config.retry_after_s)
            return await self._await(waiting, start, hold_s, deadline_s, pool)
        finally:
            gauge.dec()
            self.waiting.pop(key, None)

    async def _await(self, waiting: Waiting, start: float, hold_s: float, deadline_s: float | None,
                     pool: str) -> web.Response:
        end = start + deadline_s if deadline_s is not None else math.inf
        try:
            await asyncio.wait_for(waiting.started.wait(), max(0.0, start + hold_s - time.monotonic()))
        except asyncio.TimeoutError:
            self.metrics.queue_seconds.labels(pool).observe(time.monotonic() - start)
            return self._no_start(pool, end)
        queued_s = waiting.started_at - start
        self.metrics.queue_seconds.labels(pool).observe(queued_s)
        while True:  # each start (a redelivery after an engine died) gives the answer a new upstream timeout
            last_start = waiting.started_at
            timeout = min(end, last_start + self.config.upstream_timeout_s) - time.monotonic()
            try:
                answer = await asyncio.wait_for(asyncio.shield(waiting.answer), max(0.0, timeout))
            except asyncio.TimeoutError:
                if waiting.started_at != last_start and time.monotonic() < end:
                    continue
                if time.monotonic() >= end:
                    return error_response(504, "deadline_exceeded",
                                          "the request's X-SIE-Timeout-Ms passed before its answer came")
                return error_response(504, "deadline_exceeded",
                                      f"engine {waiting.worker} did not answer within "
                                      f"{self.config.upstream_timeout_s:g}s")
            return self._answer(answer, queued_s)

    def _no_start(self, pool: str, end: float) -> web.Response:
        if time.monotonic() >= end:
            return error_response(504, "deadline_exceeded",
                                  "the request's X-SIE-Timeout-Ms passed before an engine took it from the queue")
        return error_response(
            503, "no_worker",
            f"no engine of pool '{pool}' took the request from the queue within {self.config.hold_timeout_s:g}s; "
            "retry later", retry_after_s=self.config.retry_after_s)

    @staticmethod
    def _answer(answer: wire.Answer, queued_s: float) -> web.Response:
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in wire.DROPPED}
        headers["X-SIE-Router-Queue-Ms"] = f"{queued_s * 1000.0:.3f}"
        return web.Response(status=answer.status, body=answer.body, headers=headers)
