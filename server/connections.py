"""Client connections: a bound on how many are served, timeouts for slow and idle ones,
and probes that are answered even at the bound.

aiohttp accepts every connection it is offered; each one holds a socket, a protocol
object and buffers, so clients that open connections and never finish a request (slow
or hostile ones) could exhaust file descriptors and lock everyone out.
`ConnectionLimitedRunner` (the server's `web.AppRunner`) therefore

- serves at most `max_connections` connections at once; at the bound, a new connection
  first takes the place of the longest-idle one (a keep-alive connection waiting for its
  next request, or one that has sent nothing yet), so sockets opened and left idle cannot
  lock out clients that send requests (1,030 re-opened idle sockets refused 86 of 88
  requests, issue #30.5); only when every connection is busy is it refused. Above
  `PRESSURE_SHARE` of the bound, a new connection gets `PRESSURE_IDLE_S` instead of the
  keep-alive timeout to send its first byte (Envoy's overload manager shortens idle
  timeouts the same way);
- closes connections whose answer stays unread for `send_timeout_s` (slow_clients.py);
- closes slow and idle ones (`ServerSettings`: keep-alive and head timeouts here, body
  timeouts in body.py), so a slot held by a slow client comes back within seconds;
- beyond the bound, keeps up to `probe_connections` more connections just long enough
  to read their request head: a liveness or readiness probe (`GET /healthz`,
  `GET /readyz`) is answered there, so an orchestrator does not restart a server that
  is merely full; anything else gets a short `503 too_many_connections` with
  `Retry-After`. When that reserve is full, its oldest connection (one that has not
  sent a whole head) is closed to make room, so idle sockets cannot starve probes,
  which send their head at once;
- turns off aiohttp's decompression (body.py inflates off the event loop instead), logs
  client-caused errors without tracebacks and accept failures once per interval
  (quiet_errors.py).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import resource
import time
from typing import cast

import orjson
from aiohttp import web

from .access_log import QueryRedactingLogger
from .errors import HTTPProblem, error_body
from .parse_errors import ContractErrors
from .quiet_errors import ClientErrorLogger, limit_accept_errors
from .settings import ServerSettings
from .slow_clients import HeadTimeout, bounded_request_factory
from .state import LIFECYCLE, SETTINGS

log = logging.getLogger(__name__)

# How long a connection beyond the bound may take to send its request head.
REFUSE_WAIT_S = 5.0
# How long aiohttp keeps reading (and dropping) a body its handler did not read before it
# closes the connection (so the client can read the answer instead of seeing a reset).
LINGER_S = 2.0
PROBES = {b"/healthz": "healthz", b"/readyz": "readyz"}
# Above this share of --max-connections the server is under pressure: new connections get
# PRESSURE_IDLE_S (at most the keep-alive timeout) to send their first byte.
PRESSURE_SHARE = 0.75
PRESSURE_IDLE_S = 1.0
# The most connections looked at for an idle one per new connection at the bound (the oldest
# first; a bounded scan keeps accepts cheap under a flood of busy ones).
IDLE_SCAN = 64


def _answer(status: str, body: dict, retry_after: bool = False) -> bytes:
    data = orjson.dumps(body)
    retry = b"Retry-After: 1\r\n" if retry_after else b""
    return (b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\n" + retry
            + b"Connection: close\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)


def _problem(status: str, code: str, message: str) -> bytes:
    return _answer(status, error_body(HTTPProblem(code, message), openai_shape=False), retry_after=True)


REFUSAL = _problem("503 Service Unavailable", "too_many_connections",
                   "too many open connections to this server; retry after Retry-After seconds")


def probe_answer(app: web.Application | None, probe: str) -> bytes:
    """What /healthz or /readyz answers (the same bodies as their handlers)."""
    if probe == "healthz":
        return _answer("200 OK", {"status": "ok"})
    lifecycle = app.get(LIFECYCLE) if app is not None else None
    if lifecycle is not None and lifecycle.draining:
        return _problem("503 Service Unavailable", "draining", "the server is draining before shutdown")
    if lifecycle is not None and not lifecycle.ready:
        return _problem("503 Service Unavailable", "not_ready", "preloading models")
    return _answer("200 OK", {"status": "ready"})


class _BeyondTheCap(asyncio.Protocol):
    """A connection beyond the bound: reads the request head, answers a probe or 503, closes."""

    def __init__(self, factory: _LimitedFactory, wait_s: float):
        self._factory = factory
        self._wait_s = wait_s
        self._head = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream server hands its protocols a (write-capable) Transport; BaseProtocol's signature is wider
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self._timer = asyncio.get_running_loop().call_later(self._wait_s, transport.close)

    def data_received(self, data: bytes) -> None:
        self._head = (self._head + data)[:8192]
        if b"\r\n\r\n" in self._head or len(self._head) >= 8192:
            self._answer()

    def eof_received(self) -> None:
        self._answer()

    def _answer(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            method, _, rest = self._head.partition(b" ")
            target = rest.split(b" ", 1)[0].split(b"?", 1)[0]
            probe = PROBES.get(target) if method in (b"GET", b"HEAD") else None
            self.transport.write(REFUSAL if probe is None else probe_answer(self._factory.app, probe))
            self.transport.close()
        self._timer.cancel()

    def connection_lost(self, exc) -> None:
        self._timer.cancel()
        self._factory.beyond.pop(self, None)


class _LimitedFactory:
    def __init__(self, server: web.Server, app: web.Application | None, max_connections: int,
                 settings: ServerSettings):
        if not getattr(server.request_factory, "bounded", False):  # once per server (a site per address)
            server.request_factory = bounded_request_factory(server.request_factory)
        self._server = server
        self.app = app
        self._max = max_connections
        self._reserve = max(1, settings.probe_connections)
        self._head_timeout_s = settings.head_timeout_s
        self._keepalive_timeout_s = settings.keepalive_timeout_s
        self._send_timeout_s = settings.send_timeout_s
        self.beyond: collections.OrderedDict[_BeyondTheCap, None] = collections.OrderedDict()
        # served connections, the one that received bytes longest ago first
        self.served: collections.OrderedDict[HeadTimeout, None] = collections.OrderedDict()
        self._warned_at = 0.0
        self.idle_closed = 0  # idle connections closed to make room (logged with the warning)

    def _serve(self, first_byte_s: float) -> HeadTimeout:
        # aiohttp's Server builds a RequestHandler from its own loop and kwargs (Server.__call__);
        # ContractErrors is that handler with the contract's parse-error answers (parse_errors.py)
        inner = ContractErrors(self._server, loop=self._server._loop, **self._server._kwargs)
        guard = HeadTimeout(inner, self._head_timeout_s, first_byte_s, self._send_timeout_s,
                            on_lost=self._lost, on_data=self._active)
        self.served[guard] = None
        return guard

    def _lost(self, guard: HeadTimeout) -> None:
        self.served.pop(guard, None)

    def _active(self, guard: HeadTimeout) -> None:
        if guard in self.served:
            self.served.move_to_end(guard)

    def _close_an_idle_one(self) -> bool:
        for guard in itertools.islice(self.served, IDLE_SCAN):
            if guard.idle:
                self.served.pop(guard)
                guard.close()
                self.idle_closed += 1
                return True
        return False

    def __call__(self) -> asyncio.Protocol:
        open_now = len(self._server.connections)
        if open_now < self._max:
            pressed = open_now >= PRESSURE_SHARE * self._max
            return self._serve(min(PRESSURE_IDLE_S, self._keepalive_timeout_s) if pressed
                               else self._keepalive_timeout_s)
        now = time.monotonic()
        if self._close_an_idle_one():  # its slot goes to this connection (closing frees it at once)
            if now - self._warned_at > 10:  # at most one line per 10 s under a flood
                self._warned_at = now
                log.warning("%d connections open (the limit): new ones took the place of idle ones (%d so far)",
                            self._max, self.idle_closed)
            return self._serve(min(PRESSURE_IDLE_S, self._keepalive_timeout_s))
        if now - self._warned_at > 10:
            self._warned_at = now
            log.warning("%d connections open (the limit), none idle: answering probes only, others 503",
                        self._max)
        if len(self.beyond) >= self._reserve:
            oldest, _ = self.beyond.popitem(last=False)
            if oldest.transport is not None:
                oldest.transport.close()
        protocol = _BeyondTheCap(self, min(REFUSE_WAIT_S, self._head_timeout_s))
        self.beyond[protocol] = None
        return protocol


class ConnectionLimitedRunner(web.AppRunner):
    """`web.AppRunner` whose sites serve at most `max_connections` connections at once, with
    the timeouts, probe reserve and quiet logs above, all from the app's `ServerSettings`."""

    def __init__(self, app: web.Application, *, max_connections: int | None = None,
                 settings: ServerSettings | None = None, **kwargs):
        # the router passes its own (it serves through the same bounds); the server's app holds them
        settings = settings or app.get(SETTINGS) or ServerSettings()
        kwargs.setdefault("keepalive_timeout", settings.keepalive_timeout_s)
        kwargs.setdefault("auto_decompress", False)
        kwargs.setdefault("lingering_time", LINGER_S)
        kwargs.setdefault("logger", ClientErrorLogger())
        kwargs.setdefault("access_log_class", QueryRedactingLogger)  # no query values in the log
        super().__init__(app, **kwargs)
        self.max_connections = usable_connections(max_connections or settings.max_connections)
        self._settings = settings

    async def setup(self) -> None:
        await super().setup()
        limit_accept_errors(asyncio.get_running_loop())

    @property
    def server(self):
        server = web.AppRunner.server.fget(self)
        if server is None:
            return None
        return _LimitedFactory(server, self.app, self.max_connections, self._settings)


def usable_connections(wanted: int) -> int:
    """`wanted`, lowered to what the process's file-descriptor limit allows (with room for
    model files, logs, the listener and the probe reserve), so the limit answers 503 before
    accept fails."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and wanted > soft - 64:
        allowed = max(1, soft - 64)
        log.warning("--max-connections %d exceeds the open-file limit %d; serving at most %d", wanted, soft, allowed)
        return allowed
    return wanted
