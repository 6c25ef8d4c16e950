"""The request-head timeout: a connection that starts a request must finish its head soon.

aiohttp closes a connection that waits too long for its next request (its keep-alive
timer, which also runs from a new connection's start), but once bytes of a head arrive
it waits for the rest as long as the keep-alive allows. `HeadTimeout` wraps aiohttp's
protocol for one connection: the first byte of a request starts a timer, the request's
handler starting stops it (`request_started`, called by the middleware), and a head
still incomplete when it fires closes the connection. Body timeouts are body.py's.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

log = logging.getLogger(__name__)


class HeadTimeout(asyncio.Protocol):
    """aiohttp's `RequestHandler` for one connection, plus the head timer."""

    def __init__(self, inner: web.RequestHandler, head_timeout_s: float, first_byte_timeout_s: float):
        self.inner = inner
        self._timeout = head_timeout_s
        self._first_byte_timeout = first_byte_timeout_s
        self._timer: asyncio.TimerHandle | None = None
        self._silence: asyncio.TimerHandle | None = None
        self._busy = 0  # requests of this connection whose handler is running

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)
        # a connection that never sends a byte (recent aiohttp closes it after its keep-alive
        # timeout too; older releases never do)
        self._silence = asyncio.get_running_loop().call_later(self._first_byte_timeout, self.inner.force_close)

    def data_received(self, data: bytes) -> None:
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None
        if data and self._timer is None and not self._busy:
            self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expired)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        if self._silence is not None:
            self._silence.cancel()
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def request_started(self) -> None:
        self._busy += 1
        self._stop_timer()

    def request_finished(self) -> None:
        self._busy -= 1

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if not self._busy:
            log.info("closing a connection whose request head did not arrive within %gs", self._timeout)
            self.inner.force_close()


def _guard(request: web.BaseRequest) -> HeadTimeout | None:
    transport = request.transport
    protocol = transport.get_protocol() if transport is not None else None
    return protocol if isinstance(protocol, HeadTimeout) else None


def request_started(request: web.BaseRequest) -> None:
    """The request's head has arrived whole: stop its connection's head timer."""
    guard = _guard(request)
    if guard is not None:
        guard.request_started()


def request_finished(request: web.BaseRequest) -> None:
    guard = _guard(request)
    if guard is not None:
        guard.request_finished()
