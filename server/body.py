"""Reading a request body: time bounds, size bounds and content encodings.

A body must keep arriving (`idle_timeout_s` between two reads) and arrive whole within
`total_timeout_s`, else 408 `request_timeout` (a client that sends part of a body and
stops must not hold a connection). aiohttp's own decompression is off (connections.py):
it inflates on the event loop, so a few gzip bombs stalled every client. Here a
`Content-Encoding: gzip | deflate` body is read compressed (bounded by `max_bytes`),
then inflated on a small pool of worker threads, a piece at a time, stopping as soon
as the output passes `max_bytes` (413) or the time bound passes; a body that is not
what its encoding says is 400, any other encoding 415.

Every byte read (and every inflated byte) is counted in the app's `BodyBudget`
(body_budget.py): a body that would pass the budget of all bodies held at once is 429,
before it is read when its length is declared.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from sie_engine.errors import InvalidRequest, PayloadTooLarge

from .body_budget import budget_of
from .errors import HTTPProblem

# Content-Encoding -> zlib's wbits (None: nothing to undo).
_WBITS = {"identity": None, "gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
ENCODINGS = ("gzip", "deflate", "identity")
# Output produced per inflate step: small enough that the size and time checks come often.
_STEP_BYTES = 1 << 20
# Bodies are inflated here, not on the default executor, so bombs cannot crowd out other
# off-loop work; zlib releases the GIL while it inflates, so the event loop keeps running.
_INFLATE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sie-inflate")
# The longest a body may take to inflate (64 MiB of output takes well under a second).
INFLATE_TIMEOUT_S = 10.0


def body_timeout(message: str) -> HTTPProblem:
    return HTTPProblem("request_timeout", message)


def _encoding(request: web.BaseRequest) -> str:
    if getattr(request.content, "total_compressed_bytes", None) is not None:
        return "identity"  # aiohttp already inflated it (an app run without connections.py's runner)
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower() or "identity"
    if encoding not in _WBITS:
        raise HTTPProblem("unsupported_media_type", f"Content-Encoding {encoding!r} is not supported; send the body "
                                                    f"as {', '.join(ENCODINGS)}", field="Content-Encoding")
    return encoding


async def _read_raw(request: web.BaseRequest, max_bytes: int, idle_timeout_s: float, total_timeout_s: float) -> bytes:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + total_timeout_s
    chunks: list[bytes] = []
    size = 0
    budget = budget_of(request)
    declared = request.content_length or 0
    if declared > max_bytes:  # refused before a byte of it is read
        raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes; split the items over several requests")
    if budget is not None:
        budget.reserve(request, declared)
    while True:
        wait = min(idle_timeout_s, deadline - loop.time())
        if wait <= 0:
            raise body_timeout(f"the request body took longer than {total_timeout_s:g}s to arrive")
        try:
            if request.content.is_eof():  # all of it is here: the read cannot wait (and skips wait_for's task)
                chunk = await request.content.readany()
            else:
                chunk = await asyncio.wait_for(request.content.readany(), wait)
        except asyncio.TimeoutError:
            if loop.time() >= deadline:
                raise body_timeout(f"the request body took longer than {total_timeout_s:g}s to arrive") from None
            raise body_timeout(f"the request body stopped arriving: nothing for {idle_timeout_s:g}s") from None
        except ConnectionError:
            # the client went away: its handler is being cancelled, but wait_for may hand back the
            # payload's "connection lost" first; answer it as the cancellation it is (a 499 line)
            raise asyncio.CancelledError() from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(f"the body is larger than {max_bytes} bytes; split the items over several requests")
        if budget is not None and size > declared:  # a chunked body (or one longer than declared): as it comes
            budget.reserve(request, size - max(declared, size - len(chunk)))
        chunks.append(chunk)


def inflate(data: bytes, encoding: str, max_bytes: int, timeout_s: float = INFLATE_TIMEOUT_S) -> bytes:
    """`data` decompressed; PayloadTooLarge as soon as the output passes `max_bytes` or the
    work passes `timeout_s`, InvalidRequest for data that is not in that encoding."""
    wbits = _WBITS[encoding]
    if wbits is None:  # identity: the body is sent as it is (read_body does not call this for it)
        return data
    if encoding == "deflate" and data[:1] and data[0] & 0x0F != 8:
        wbits = -zlib.MAX_WBITS  # a raw deflate stream without the zlib header (common; RFC 9110 says zlib)
    inflater = zlib.decompressobj(wbits)
    deadline = time.monotonic() + timeout_s
    pieces, size = [], 0
    try:
        while True:
            piece = inflater.decompress(data, _STEP_BYTES)
            size += len(piece)
            if size > max_bytes:
                raise PayloadTooLarge(f"the body decompresses to more than {max_bytes} bytes; "
                                      "split the items over several requests")
            if time.monotonic() > deadline:
                raise PayloadTooLarge(f"the body took longer than {timeout_s:g}s to decompress")
            pieces.append(piece)
            data = inflater.unconsumed_tail
            if inflater.eof or (not data and len(piece) < _STEP_BYTES):  # a full piece may leave output pending
                break
    except zlib.error as exc:
        raise InvalidRequest(f"the body is not valid {encoding} data ({exc}); send it compressed as "
                             f"Content-Encoding says, or drop the header", field="Content-Encoding") from None
    if not inflater.eof:
        raise InvalidRequest(f"the {encoding} body is truncated", field="Content-Encoding")
    return b"".join(pieces)


def request_encoding(request: web.BaseRequest) -> str:
    """The body's Content-Encoding, one of `ENCODINGS` (or x-gzip); 415 for any other."""
    return _encoding(request)


async def read_raw(request: web.BaseRequest, max_bytes: int, idle_timeout_s: float, total_timeout_s: float) -> bytes:
    """The body's bytes as sent (still compressed), within the time, size and budget bounds
    above: the router forwards an encoded body untouched and lets the worker inflate it."""
    return await _read_raw(request, max_bytes, idle_timeout_s, total_timeout_s)


async def inflate_off_loop(data: bytes, encoding: str, max_bytes: int) -> bytes:
    """`inflate` on the inflate pool (the event loop keeps serving while a bomb is stopped)."""
    return await asyncio.get_running_loop().run_in_executor(_INFLATE_POOL, inflate, data, encoding, max_bytes)


async def read_body(request: web.BaseRequest, max_bytes: int, idle_timeout_s: float, total_timeout_s: float) -> bytes:
    """The body's bytes, decompressed, within the bounds above."""
    encoding = _encoding(request)
    raw = await _read_raw(request, max_bytes, idle_timeout_s, total_timeout_s)
    if _WBITS[encoding] is None or not raw:
        return raw
    inflated = await asyncio.get_running_loop().run_in_executor(_INFLATE_POOL, inflate, raw, encoding, max_bytes)
    budget = budget_of(request)
    if budget is not None:
        budget.reserve(request, len(inflated))
    return inflated
