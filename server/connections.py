"""A bound on concurrent client connections.

aiohttp accepts every connection it is offered; each one holds a socket, a
protocol object and buffers, so clients that open connections and never finish
a request (slow or hostile ones) could exhaust file descriptors and memory.
`ConnectionLimitedRunner` hands its sites a protocol factory that serves a new
connection only while fewer than `max_connections` are open; beyond that the
connection gets a short `503 overloaded` answer with `Retry-After` and is closed.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time

import orjson
from aiohttp import web

log = logging.getLogger(__name__)

_BODY = orjson.dumps({"error": {"code": "too_many_connections",
                                "message": "too many open connections to this server; "
                                           "retry after Retry-After seconds"}})
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           b"Connection: close\r\nContent-Length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY)
# How long a refused connection may take to send its request head before it is just closed.
REFUSE_WAIT_S = 5.0


class _Refuse(asyncio.Protocol):
    """Reads the request head (so the client sees the answer, not a reset), answers 503, closes."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._seen = b""
        self._timer = asyncio.get_running_loop().call_later(REFUSE_WAIT_S, transport.close)

    def data_received(self, data: bytes) -> None:
        seen = self._seen + data
        if b"\r\n\r\n" in seen:
            self._answer()
        self._seen = seen[-3:]  # the end of the head may straddle two reads

    def eof_received(self) -> None:
        self._answer()

    def _answer(self) -> None:
        if not self._transport.is_closing():
            self._transport.write(REFUSAL)
            self._transport.close()
        self._timer.cancel()

    def connection_lost(self, exc) -> None:
        self._timer.cancel()


class _LimitedFactory:
    def __init__(self, server: web.Server, max_connections: int):
        self._server = server
        self._max = max_connections
        self._warned_at = 0.0

    def __call__(self) -> asyncio.Protocol:
        if len(self._server.connections) >= self._max:
            now = time.monotonic()
            if now - self._warned_at > 10:  # at most one line per 10 s under a flood
                self._warned_at = now
                log.warning("%d connections open (the limit): refusing new ones with 503", self._max)
            return _Refuse()
        return self._server()


class ConnectionLimitedRunner(web.AppRunner):
    """`web.AppRunner` whose sites serve at most `max_connections` connections at once."""

    def __init__(self, app: web.Application, *, max_connections: int, **kwargs):
        super().__init__(app, **kwargs)
        self.max_connections = usable_connections(max_connections)

    @property
    def server(self):
        server = web.AppRunner.server.fget(self)
        return None if server is None else _LimitedFactory(server, self.max_connections)


def usable_connections(wanted: int) -> int:
    """`wanted`, lowered to what the process's file-descriptor limit allows (with room for
    model files, logs and the listener), so the limit answers 503 before accept fails."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and wanted > soft - 64:
        allowed = max(1, soft - 64)
        log.warning("--max-connections %d exceeds the open-file limit %d; serving at most %d", wanted, soft, allowed)
        return allowed
    return wanted
