"""The request-head timeout: a connection that starts a request must finish its head soon.

aiohttp closes a connection that waits too long for its next request (its keep-alive
timer, which also runs from a new connection's start), but once bytes of a head arrive
it waits for the rest as long as the keep-alive allows. `HeadTimeout` wraps aiohttp's
protocol for one connection: the first byte of a request starts a timer, the request's
handler starting stops it (`request_started`, called by the middleware), and a head
still incomplete when it fires closes the connection. Body timeouts are body.py's.

The send timeout (nginx's `send_timeout`): aiohttp writes a whole answer into the
transport, which keeps what the socket does not take; a client that asks for a large
answer and never reads would pin it for as long as it keeps the socket open (30 clients
held 369 MiB for minutes, issue #30.5). The transport pauses the writer when its buffer
passes the high-water mark; a write still paused `send_timeout_s` later aborts the
connection, which frees the buffer at once.

`idle`: no request in progress, none arriving, nothing left to send; connections.py closes
such connections first when the server is full.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from aiohttp import web

log = logging.getLogger(__name__)


class HeadTimeout(asyncio.Protocol):
    """aiohttp's `RequestHandler` for one connection, plus the head timer."""

    def __init__(self, inner: web.RequestHandler, head_timeout_s: float, first_byte_timeout_s: float,
                 send_timeout_s: float = float("inf"), on_lost: Callable[[HeadTimeout], None] | None = None,
                 on_data: Callable[[HeadTimeout], None] | None = None):
        self.inner = inner
        self._timeout = head_timeout_s
        self._first_byte_timeout = first_byte_timeout_s
        self._send_timeout = send_timeout_s
        self._on_lost = on_lost
        self._on_data = on_data
        self._timer: asyncio.TimerHandle | None = None
        self._silence: asyncio.TimerHandle | None = None
        self._blocked: asyncio.TimerHandle | None = None  # the send timer, while writing is paused
        self._busy = 0  # requests of this connection whose handler is running
        self._transport: asyncio.Transport | None = None
        # bytes of the current request's first line so far (parse_errors.py tells a request line
        # over aiohttp's limit, 414, from a header over it, 431)
        self.first_line_bytes = 0
        self._first_line_done = False

    @property
    def idle(self) -> bool:
        """Waiting for its next request with nothing of one received and nothing left to send."""
        inner = self.inner
        waiter = getattr(inner, "_waiter", None)  # aiohttp's own test for its keep-alive close
        return (self._transport is not None and not self._transport.is_closing() and not self._busy
                and self._timer is None and self._blocked is None and self._transport.get_write_buffer_size() == 0
                and (waiter is None or not waiter.done()) and not getattr(inner, "_messages", ())
                and not getattr(inner, "_request_in_progress", False))

    def close(self) -> None:
        self.inner.force_close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
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
        if not self._first_line_done:
            end = data.find(b"\n")
            self.first_line_bytes += len(data) if end < 0 else end
            self._first_line_done = end >= 0
        if self._on_data is not None:
            self._on_data(self)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        if self._silence is not None:
            self._silence.cancel()
        if self._blocked is not None:
            self._blocked.cancel()
            self._blocked = None
        self._transport = None
        if self._on_lost is not None:
            self._on_lost(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._blocked is None and self._send_timeout != float("inf"):
            self._blocked = asyncio.get_running_loop().call_later(self._send_timeout, self._send_expired)
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self._blocked is not None:  # the client read: the next pause starts a new timer
            self._blocked.cancel()
            self._blocked = None
        self.inner.resume_writing()

    def _send_expired(self) -> None:
        self._blocked = None
        if self._transport is not None:
            log.info("closing a connection that read none of its answer for %gs (%d bytes unsent)",
                     self._send_timeout, self._transport.get_write_buffer_size())
            self._transport.abort()  # close() would wait for the buffer to drain

    def request_started(self) -> None:
        self._busy += 1
        self._stop_timer()

    def request_finished(self) -> None:
        self._busy -= 1
        self.first_line_bytes, self._first_line_done = 0, False  # the next request starts afresh

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
