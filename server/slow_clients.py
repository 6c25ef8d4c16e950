"""The request-head timeout: a connection that starts a request must finish its head soon.

aiohttp closes a connection that waits too long for its next request (its keep-alive
timer, which also runs from a new connection's start), but once bytes of a head arrive
it waits for the rest as long as the keep-alive allows. `HeadTimeout` wraps aiohttp's
protocol for one connection: the first byte of a request starts a timer, aiohttp parsing
the whole head or the request's handler starting stops it (`request_started`, called by the
middleware), and a head still incomplete when it fires closes the connection. Body timeouts are body.py's.

The send timeout (nginx's `send_timeout`): aiohttp writes a whole answer into the
transport, which keeps what the socket does not take; a client that asks for a large
answer and never reads would pin it for as long as it keeps the socket open (30 clients
held 369 MiB for minutes, issue #30.5). The transport pauses the writer when its buffer
passes the high-water mark; a write still paused `send_timeout_s` later aborts the
connection, which frees the buffer at once.

The write-buffer bound (`WRITE_BUFFER_BYTES`): asyncio's transport copies whatever the socket does
not take into a buffer of its own (Python 3.11: a bytearray it also shifts on every partial send),
so an answer of 17 MB that is not read was held twice, once by the handler and once by the
transport. `BoundedWrites` hands the transport at most the bound and keeps the rest as a view of
the handler's own bytes, fed on as the client reads; aiohttp's writer sees the connection paused
until all of it is handed on, so the handler's drain waits, and the send timeout runs from the last
time the client read anything.

`idle`: no request in progress, none arriving, nothing left to send; connections.py closes
such connections first when the server is full.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import cast

from aiohttp import web
from aiohttp.http_writer import StreamWriter

log = logging.getLogger(__name__)

# The most bytes of answers one connection's transport buffers (what the kernel's socket buffer does
# not take); the rest of an answer stays a view of the handler's bytes until the client reads.
WRITE_BUFFER_BYTES = 1 << 20
HIGH_WATER = 1 << 16


class UncoalescedWriter(StreamWriter):
    """aiohttp's writer, except that an answer of `WRITE_BUFFER_BYTES` or more is handed to the
    transport as its own bytes: aiohttp joins the head and the body into one new bytes object
    (on Python before 3.12.9, where it avoids `writelines`), a copy of every large answer that
    `BoundedWrites` would then have to hold. Small answers are still joined (one send)."""

    def _writelines(self, chunks) -> None:
        chunks = list(chunks)
        if sum(len(chunk) for chunk in chunks) < WRITE_BUFFER_BYTES:
            super()._writelines(chunks)
            return
        for chunk in chunks:
            self._write(chunk)


def bounded_request_factory(factory: Callable[..., web.BaseRequest]) -> Callable[..., web.BaseRequest]:
    """`web.Server.request_factory` whose requests write through `UncoalescedWriter`."""
    def make(message, payload, protocol, writer, task, *args, **kwargs):
        return factory(message, payload, protocol, UncoalescedWriter(protocol, asyncio.get_running_loop()), task,
                       *args, **kwargs)

    make.bounded = True  # type: ignore[attr-defined]
    return make


class BoundedWrites:
    """A connection's transport as aiohttp's writer sees it: at most `bound` bytes buffered in the
    real transport, the rest of what is written held as views (no copy) until `feed` hands it on."""

    def __init__(self, transport: asyncio.Transport, bound: int, on_held: Callable[[], None]):
        self._transport = transport
        self._bound = bound
        self._on_held = on_held  # called when the held bytes start or stop
        self._held: collections.deque[memoryview] = collections.deque()
        self._close_when_sent = False
        # asyncio's default marks (64 KiB, 16 KiB), well below the bound: holding bytes (the buffer
        # filled to the bound) always means the transport has paused, so its resume_writing comes to
        # feed the rest, and an answer left mostly unread pauses (and is timed) as it did before
        transport.set_write_buffer_limits(high=min(HIGH_WATER, bound // 2))

    def __getattr__(self, name: str):  # the rest of the transport's interface, unchanged
        return getattr(self._transport, name)

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def held_bytes(self) -> int:
        return sum(len(view) for view in self._held)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self.held_bytes()

    def write(self, data) -> None:
        view = memoryview(data if isinstance(data, bytes) else bytes(data))  # a bytearray may change later
        if not view:
            return
        was_holding = self.holding
        self._held.append(view)
        self.feed()
        if self.holding != was_holding:
            self._on_held()

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def feed(self) -> None:
        """Hand the real transport what fits under the bound."""
        transport = self._transport
        while self._held and not transport.is_closing():
            room = self._bound - transport.get_write_buffer_size()
            if room <= 0:
                return
            view = self._held[0]
            if len(view) <= room:
                transport.write(self._held.popleft())
            else:
                transport.write(view[:room])
                self._held[0] = view[room:]
        if not self._held and self._close_when_sent:
            transport.close()

    def resumed(self) -> None:
        """The real transport's buffer drained below its low-water mark: feed on."""
        was_holding = self.holding
        self.feed()
        if self.holding != was_holding:
            self._on_held()

    def is_closing(self) -> bool:
        return self._close_when_sent or self._transport.is_closing()

    def close(self) -> None:
        if self._held:  # what is held is sent first, as the transport's own close sends its buffer
            self._close_when_sent = True
        else:
            self._transport.close()

    def abort(self) -> None:
        self.drop()
        self._transport.abort()

    def drop(self) -> None:
        """Let go of the held views (the connection is gone)."""
        self._held.clear()


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
        self._writes: BoundedWrites | None = None
        self._real_paused = False  # the transport's buffer is over its high-water mark
        self._inner_paused = False  # what aiohttp's writer was told: that, or bytes still held
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
                and self._timer is None and self._blocked is None and self._buffered() == 0
                and (waiter is None or not waiter.done()) and not getattr(inner, "_messages", ())
                and not getattr(inner, "_request_in_progress", False))

    def close(self) -> None:
        self.inner.force_close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._writes = BoundedWrites(self._transport, WRITE_BUFFER_BYTES, self._update_paused)
        # aiohttp's handler writes through the bound; the writes object passes the rest of the transport's API on
        self.inner.connection_made(cast(asyncio.Transport, self._writes))
        # a connection that never sends a byte (recent aiohttp closes it after its keep-alive
        # timeout too; older releases never do)
        self._silence = asyncio.get_running_loop().call_later(self._first_byte_timeout, self.inner.force_close)

    def data_received(self, data: bytes) -> None:
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None
        if not self._first_line_done:
            end = data.find(b"\n")
            self.first_line_bytes += len(data) if end < 0 else end
            self._first_line_done = end >= 0
        if self._on_data is not None:
            self._on_data(self)
        self.inner.data_received(data)
        # Once the whole head is here, no timer: its handler starts a loop turn or two later, which
        # on a starved machine can be past the timeout. A head that came whole in one read (nearly
        # every one) never starts a timer at all; a partial one starts it at its first bytes.
        if self._timer is None:
            if data and not self._busy and not self._head_parsed():
                self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expired)
        elif self._head_parsed():
            self._stop_timer()

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
        if self._writes is not None:
            self._writes.drop()
        if self._on_lost is not None:
            self._on_lost(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._real_paused = True
        self._update_paused()

    def resume_writing(self) -> None:
        self._real_paused = False
        self._stop_send_timer()  # the client read: a send still blocked starts a new timer
        if self._writes is not None:
            self._writes.resumed()
        self._update_paused()
        if self._inner_paused and self._blocked is None:
            self._start_send_timer()

    def _update_paused(self) -> None:
        """Tell aiohttp's writer it is paused while the transport's buffer is full or bytes are held."""
        paused = self._real_paused or (self._writes is not None and self._writes.holding)
        if paused and not self._inner_paused:
            self._inner_paused = True
            self._start_send_timer()
            self.inner.pause_writing()
        elif not paused and self._inner_paused:
            self._inner_paused = False
            self._stop_send_timer()
            self.inner.resume_writing()

    def _start_send_timer(self) -> None:
        if self._blocked is None and self._send_timeout != float("inf"):
            self._blocked = asyncio.get_running_loop().call_later(self._send_timeout, self._send_expired)

    def _stop_send_timer(self) -> None:
        if self._blocked is not None:
            self._blocked.cancel()
            self._blocked = None

    def _buffered(self) -> int:
        return self._writes.get_write_buffer_size() if self._writes is not None else 0

    def _send_expired(self) -> None:
        self._blocked = None
        if self._transport is not None:
            log.info("closing a connection that read none of its answer for %gs (%d bytes unsent)",
                     self._send_timeout, self._buffered())
            if self._writes is not None:
                self._writes.abort()  # close() would wait for the buffer to drain
            else:
                self._transport.abort()

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

    def _head_parsed(self) -> bool:
        """aiohttp has parsed a whole request head that no handler has taken yet."""
        return bool(getattr(self.inner, "_messages", ()))

    def _expired(self) -> None:
        self._timer = None
        if not self._busy and not self._head_parsed():
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
