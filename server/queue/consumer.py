"""The engine's side of queue mode: pull the pool's work when there is room, answer, then ack.

Why a message runs through the server's own HTTP listener (loopback) rather than the engine's
methods directly: a queued request then passes exactly what a direct one passes (route, field
checks, admission, deadline, compat APIs, error shapes, metrics), and its answer bytes are the
ones direct mode would send. The cost is one loopback round trip (well under a millisecond here).

Pull policy: a message is fetched only while this server is ready, not draining, holds fewer
than --queue-concurrency messages and its admission would let a request in now (the queue wait
under --max-queue-wait, `Engine.refuse_if_overloaded`): what an engine cannot admit stays in the
stream for another engine, and KEDA sees it as lag. Each message held is charged to admission as a
request whose body is not read yet, until its answer: counted beside its own reservation while it
runs, which errs on the side of leaving work in the stream (the gate closes somewhat before the
bound), never of taking more than the engine can admit. A 429 that still comes (the queue filled
between the check and the call) is retried here after its Retry-After, the message heartbeated
meanwhile; a 503 `draining`/`not_ready` hands the message back (nak) for another engine.

Leaving (SIGTERM): the engine stops pulling and serves every message it took, the last fetch's
too. Each loopback request carries this consumer's secret (QUEUE_TAKEN_HEADER), which lets taken
work past the draining gate, and the drain waits for those messages (`settle`). Once the pull has
ended its subscription is dropped, so no pull request of this engine is left open at the server.
Only what the engine cannot serve is handed back: a local 429 while leaving, work still queued
when the drain timeout runs out. Every nak counts as a delivery, so a leaving engine naks only
after its pull has ended; before, its own open pull request would take the message straight back
and hand it back again, and a graceful stop could dead-letter a request.

Every delivery: dropped (term) when its deadline or, on a first delivery, its start-by has passed
(the router has answered 504/503 already); dead-lettered when delivered more than the consumer's
limit (engines that took it died or handed it back), with a 503 to the client; else "started" to
the router, the request run while `in_progress` heartbeats keep it from redelivery, the answer sent,
and then the ack (a death between the two answers it twice: the router keeps the first).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import time
from typing import Any

import aiohttp
from aiohttp import web

from sie_engine.errors import Overloaded

from ..state import API_KEYS, ENGINE, LIFECYCLE, METRICS, QUEUE_TAKEN_HEADER, QUEUE_TOKEN, SETTINGS
from . import layout, wire

log = logging.getLogger("sie_server.queue")

# Seconds one fetch waits for a message (the pull loop looks at stop and room this often).
FETCH_WAIT_S = 1.0
# Messages one fetch takes at most: admission is asked again before the next fetch, with the
# messages just taken charged to it, so an engine overshoots what it can admit by this at most.
FETCH_BATCH = 4
# While admission would refuse, look again this often.
ROOM_RECHECK_S = 0.1
# A local 429 is retried after its Retry-After, but at most this long (the queue drains meanwhile).
MAX_LOCAL_RETRY_S = 2.0
# Waiting for the router to create the pool's consumer: look again this often.
BIND_RETRY_S = 1.0
# A loopback request that fails in transport (a keep-alive connection closed as it was reused) is
# sent again this many times in all before its message is handed back.
LOCAL_TRIES = 3


class QueueConsumer:
    def __init__(self, app: web.Application, local_url: str, name: str):
        self.app = app
        self.settings = app[SETTINGS]
        self.local_url = local_url
        self.name = name
        self.pool = layout.check_pool(self.settings.pool)
        self.nc: Any = None  # nats.aio.client.Client once started (nats is imported only then)
        self.js: Any = None
        self.session: aiohttp.ClientSession | None = None
        self.held: set[asyncio.Task] = set()
        self.stopping = asyncio.Event()
        self.room = asyncio.Event()
        # set once the pull has ended and its subscription is gone: nothing more comes to this engine
        self.pulled_out = asyncio.Event()
        # sent with each message's loopback request: taken work, let past the draining gate
        self.token = app[QUEUE_TOKEN]
        self.max_deliver = layout.QueueLayout().max_deliver
        self.ack_wait_s = layout.QueueLayout().ack_wait_s
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        # auto_decompress=False: an encoded answer goes back byte for byte with its header
        # no client timeout: the server's own deadline handling bounds a request (X-SIE-Timeout-Ms)
        # keep-alive shorter than the listener's, so this side closes an idle connection first and
        # never reuses one the server is closing
        connector = aiohttp.TCPConnector(keepalive_timeout=self.settings.keepalive_timeout_s / 2)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                             timeout=aiohttp.ClientTimeout(total=None))
        self._tasks = [asyncio.create_task(self._run(), name="sie-queue")]

    async def _run(self) -> None:
        """Connect (retried until the NATS server answers: the server serves HTTP meanwhile), then
        pull and watch the config bucket side by side."""
        import nats

        from .configs import watch_cards

        try:
            while not self.stopping.is_set():
                try:
                    self.nc = await nats.connect(self.settings.queue_url, name=f"sie-engine {self.name}",
                                                 max_reconnect_attempts=-1, allow_reconnect=True, connect_timeout=2)
                    break
                except Exception as exc:  # not reachable yet (its pod starting)
                    log.warning("queue mode: cannot reach %s yet (%s); retrying", self.settings.queue_url, exc)
                    await self._pause(BIND_RETRY_S)
            if self.nc is None:
                return
            self.js = self.nc.jetstream()
            log.info("queue mode: pulling pool %s from %s as %s", self.pool, self.settings.queue_url, self.name)
            await asyncio.gather(self._pull_loop(), watch_cards(self.js, self.app, self.stopping))
        finally:
            self.pulled_out.set()

    def stop_pulling(self) -> None:
        """No new message from now (the SIGTERM path, before the server drains)."""
        self.stopping.set()

    async def settle(self, timeout_s: float) -> bool:
        """The drain's queue half: wait until the pull has ended and every message taken is answered
        (or handed back). True when that happened within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.pulled_out.wait(), timeout_s)
        while self.held:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.wait(set(self.held), timeout=left)
        return self.pulled_out.is_set()

    async def close(self, timeout_s: float) -> None:
        """After the drain: let the held messages send their answers and acks, then disconnect."""
        self.stopping.set()
        if self.held:
            await asyncio.wait(set(self.held), timeout=timeout_s)
        for task in [*self._tasks, *self.held]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.session is not None:
            await self.session.close()
        if self.nc is not None:  # answers and acks are flushed already: close, no drain of the subscriptions
            with contextlib.suppress(Exception):
                await self.nc.flush(timeout=2)
            await self.nc.close()

    # ---- pulling ----------------------------------------------------------------------------

    async def _bind(self):
        from nats.js.errors import NotFoundError

        while not self.stopping.is_set():
            try:
                info = await self.js.consumer_info(layout.stream(self.pool), layout.CONSUMER)
            except NotFoundError:
                log.info("queue mode: no consumer for pool %s yet (the router creates it); waiting", self.pool)
                await self._pause(BIND_RETRY_S)
                continue
            self.max_deliver = int((info.config.metadata or {}).get(layout.MAX_DELIVER_KEY, self.max_deliver))
            self.ack_wait_s = info.config.ack_wait or self.ack_wait_s
            return await self.js.pull_subscribe_bind(layout.CONSUMER, layout.stream(self.pool))
        return None

    async def _pull_loop(self) -> None:
        from nats.errors import TimeoutError as NatsTimeout

        subscription = await self._bind()
        try:
            while subscription is not None and not self.stopping.is_set():
                room = await self._wait_for_room()
                if room <= 0:
                    continue
                try:
                    messages = await subscription.fetch(min(room, FETCH_BATCH), timeout=FETCH_WAIT_S)
                except (NatsTimeout, asyncio.TimeoutError):
                    continue
                except Exception as exc:  # a reconnect under way: look again shortly
                    log.warning("queue mode: fetch failed (%s); retrying", exc)
                    await self._pause(BIND_RETRY_S)
                    continue
                for message in messages:  # also those of the fetch under way when the stop came: taken work
                    task = asyncio.create_task(self._handle(message))
                    self.held.add(task)
                    task.add_done_callback(self._done)
        finally:
            if subscription is not None:  # no interest left: the server drops any pull request still open
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()
            self.pulled_out.set()

    def _done(self, task: asyncio.Task) -> None:
        self.held.discard(task)
        self.room.set()

    async def _wait_for_room(self) -> int:
        """How many messages to fetch now (0: stopping); waits while there is no room."""
        lifecycle = self.app[LIFECYCLE]
        while not self.stopping.is_set():
            free = self.settings.queue_concurrency - len(self.held)
            if lifecycle.ready and not lifecycle.draining and free > 0 and self._admits():
                return free
            self.room.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.room.wait(), ROOM_RECHECK_S)
        return 0

    def _admits(self) -> bool:
        engine = self.app[ENGINE]
        try:
            handle = engine.refuse_if_overloaded()
        except Overloaded:
            return False
        engine.pre_admission_done(handle)
        return True

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    # ---- one message ------------------------------------------------------------------------

    async def _handle(self, message) -> None:
        headers = message.headers or {}
        outcome = "answered"
        engine = self.app[ENGINE]
        # charged to admission from now until its request ends (the pull gate's next look sees it),
        # as a server charges a request whose body it has not read yet
        try:
            held = engine.refuse_if_overloaded(body_bytes=len(message.data))
        except Overloaded:
            held = None  # taken just as the queue filled: its local 429 is retried below
        try:
            outcome = await self._work(message, headers)
        except Exception:  # a fault here must not kill the pull loop; the message is redelivered
            log.exception("queue mode: message %s failed; handed back", headers.get(wire.MSG_ID))
            outcome = "handed_back"
            with contextlib.suppress(Exception):
                await self._hand_back(message)
        finally:
            engine.pre_admission_done(held)
        self.app[METRICS].queue_messages.labels(outcome).inc()

    async def _work(self, message, headers: dict[str, str]) -> str:
        now = time.time()
        deadline = _float(headers.get(wire.DEADLINE))
        start_by = _float(headers.get(wire.START_BY))
        delivered = message.metadata.num_delivered
        if (deadline is not None and now >= deadline) or (delivered == 1 and start_by is not None and now > start_by):
            await message.term()  # the router answered 504 / 503 at that moment
            return "expired"
        reply = headers.get(wire.REPLY)
        if delivered > self.max_deliver:
            await self._dead_letter(message, headers, delivered)
            return "dead_lettered"
        if reply:
            await self.nc.publish(reply, b"", headers={wire.EVENT: wire.STARTED, wire.WORKER: self.name})
        beat = asyncio.create_task(self._heartbeat(message))  # until it is answered or handed back
        try:
            answer = await self._run_locally(headers, message.data, deadline)
            if answer is None:  # this server cannot serve it: another engine will
                log.info("queue mode: message %s handed back", headers.get(wire.MSG_ID))
                await self._hand_back(message)
                return "handed_back"
        finally:
            beat.cancel()
        if reply:
            answer.headers[wire.DELIVERIES] = str(delivered)
            await self._answer(reply, answer)
        await message.ack()
        return "answered"

    async def _hand_back(self, message) -> None:
        """Give the message back for redelivery. A leaving engine waits until its own pull has ended:
        its last pull request would otherwise take the message straight back, spending a delivery."""
        if self.stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.pulled_out.wait(), 2 * FETCH_WAIT_S)
        await message.nak()

    async def _heartbeat(self, message) -> None:
        while True:
            await asyncio.sleep(max(0.2, self.ack_wait_s / 3))
            with contextlib.suppress(Exception):
                await message.in_progress()

    async def _run_locally(self, headers: dict[str, str], body: bytes, deadline: float | None) -> wire.Answer | None:
        """The request through this server's own listener; None to hand the message back."""
        assert self.session is not None
        method, path = headers.get(wire.METHOD, "POST"), headers.get(wire.PATH, "/")
        forward = {h: headers[h] for h in wire.FORWARDED if h in headers}
        forward[QUEUE_TAKEN_HEADER] = self.token
        key = self.app[API_KEYS].first_key()
        if key:
            forward["Authorization"] = f"Bearer {key}"
        failures = 0
        while True:
            if deadline is not None:
                left = deadline - time.time()
                if left <= 0:
                    return _deadline_answer()
                forward["X-SIE-Timeout-Ms"] = f"{max(1.0, left * 1000):.0f}"
            try:
                async with self.session.request(method, self.local_url + path, data=body or None,
                                                headers=forward) as resp:
                    data = await resp.read()
                    answer = wire.Answer(resp.status, dict(resp.headers), data)
            except aiohttp.ClientError as exc:  # the listener stays open until this consumer closes
                failures += 1
                if failures >= LOCAL_TRIES:
                    log.warning("queue mode: cannot reach this server's own listener (%s); handing back", exc)
                    return None
                continue
            if answer.status == 429:
                if self.stopping.is_set():  # leaving and full: an engine that stays takes it now
                    return None
                await asyncio.sleep(min(MAX_LOCAL_RETRY_S, _float(answer.headers.get("Retry-After")) or 1.0))
                continue
            if answer.status == 503 and _error_code(answer) in ("draining", "not_ready"):
                return None
            return answer

    async def _answer(self, reply: str, answer: wire.Answer) -> None:
        answer.headers[wire.WORKER] = self.name
        for head, chunk in wire.answer_messages(answer.status, answer.headers, answer.body, self.nc.max_payload):
            await self.nc.publish(reply, chunk, headers=head)
        await self.nc.flush()  # the answer is at the server before the ack leaves

    async def _dead_letter(self, message, headers: dict[str, str], delivered: int) -> None:
        """Keep the message in the pool's dead-letter stream, tell the client, drop it from the queue."""
        kept = {k: v for k, v in headers.items() if not k.startswith("Nats-")}  # its TTL and id are the work's
        kept.update({"SIE-Deliveries": str(delivered), "SIE-Dead-Worker": self.name})
        await self.js.publish(layout.dead_subject(self.pool), message.data, headers=kept)
        reply = headers.get(wire.REPLY)
        if reply:
            error = {"error": {"code": "dead_lettered", "message": (
                f"the request was delivered {delivered - 1} times and no engine answered it (each one that took it "
                f"died or handed it back); it is kept in stream {layout.dead_stream(self.pool)}: check the engines' "
                "logs before sending it again"), "retryable": False}}  # as a model_load_failed waiting will not fix
            body = json.dumps(error).encode()
            await self._answer(reply, wire.Answer(503, {"Content-Type": "application/json"}, body))
        await message.term()
        log.warning("queue mode: message %s dead-lettered after %d deliveries", headers.get(wire.MSG_ID), delivered)


def _deadline_answer() -> wire.Answer:
    error = {"error": {"code": "deadline_exceeded", "message": "the request's X-SIE-Timeout-Ms passed in the queue"}}
    return wire.Answer(504, {"Content-Type": "application/json"}, json.dumps(error).encode())


def _error_code(answer: wire.Answer) -> str:
    try:
        return str(json.loads(answer.body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


async def start(app: web.Application, host: str, port: int) -> QueueConsumer:
    """The consumer of a listening server (`host`/`port`: where it is bound)."""
    local_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if ":" in local_host:
        local_host = f"[{local_host}]"
    consumer = QueueConsumer(app, f"http://{local_host}:{port}", f"{socket.gethostname()}:{port}")
    await consumer.start()
    return consumer
