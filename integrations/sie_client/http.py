"""HTTP transports (sync and async) on httpx: one request in, the decoded answer
out, or an `SIEError` carrying the server's status, code, message and Retry-After.

A request that gets no answer raises `SIEConnectionError` saying where it failed
(`kind`: connect, write, read, pool) and whether it may have run on the server, or
`SIETimeoutError` naming the timeout that fired and its bound. The async transport
keeps one `httpx.AsyncClient` per event loop (`loops.PerLoop`), so it works from
successive `asyncio.run` calls.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from . import wire
from .errors import SIEConnectionError, SIEError, SIETimeoutError
from .loops import PerLoop
from .timeouts import Timeouts


def _headers(api_key: str | None, encoding: str) -> dict[str, str]:
    content_type = wire.MSGPACK if encoding == "msgpack" else wire.JSON
    headers = {"Content-Type": content_type, "Accept": content_type, "User-Agent": "sie-client"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to the policy's backoff


def _answer(response: httpx.Response, content: bytes) -> Any:
    content_type = response.headers.get("Content-Type")
    if response.is_success:
        return wire.loads(content, content_type)
    code, message = "http_error", content[:500].decode("utf-8", "replace") or response.reason_phrase
    reason = retryable = None
    try:
        error = wire.loads(content, content_type)["error"]
        code = error.get("code") or error.get("type") or code
        message = error.get("message", message)
        reason, retryable = error.get("reason"), error.get("retryable")
    except Exception:  # not SIE's error shape (a proxy's HTML page): keep the raw text
        pass
    raise SIEError(response.status_code, code, message, _retry_after(response), reason=reason,
                   retryable=retryable if isinstance(retryable, bool) else None)


# httpx's timeouts: the phase each one is, and whether the whole request had gone out when it fired
_TIMEOUT_KINDS: tuple[tuple[type[httpx.TimeoutException], str, bool], ...] = (
    (httpx.ConnectTimeout, "connect", False), (httpx.WriteTimeout, "write", False),
    (httpx.ReadTimeout, "read", True), (httpx.PoolTimeout, "pool", False))


class _HTTPBase:
    def __init__(self, url: str, api_key: str | None, timeouts: Timeouts, encoding: str):
        self.url = url.rstrip("/")
        self.encoding = encoding
        self.timeouts = timeouts
        self._content_type = wire.MSGPACK if encoding == "msgpack" else wire.JSON
        self._headers = _headers(api_key, encoding)

    def _attempt(self, method: str, path: str, body: Any, deadline: float | None
                 ) -> tuple[bytes | None, httpx.Timeout, float | None]:
        """The body's bytes, this attempt's timeouts and the seconds left of the total."""
        remaining = self._remaining(method, path, deadline)
        content = wire.dumps(body, self._content_type) if body is not None else None
        return content, self.timeouts.phases(remaining), remaining

    def _remaining(self, method: str, path: str, deadline: float | None) -> float | None:
        if deadline is None:
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SIETimeoutError("total", self.timeouts.total, self.url, request=f"{method} {self.url}{path}",
                                  may_have_run=True)
        return remaining

    def _check_deadline(self, method: str, path: str, deadline: float | None) -> None:
        """Between chunks of an answer: a server trickling bytes cannot outlast the total."""
        if deadline is not None and time.monotonic() > deadline:
            raise SIETimeoutError("total", self.timeouts.total, self.url, request=f"{method} {self.url}{path}",
                                  may_have_run=True)

    def _failure(self, exc: httpx.TransportError, method: str, path: str,
                 remaining: float | None) -> SIEConnectionError:
        request = f"{method} {self.url}{path}"
        for cls, kind, may_have_run in _TIMEOUT_KINDS:
            if isinstance(exc, cls):
                bound = getattr(self.timeouts, kind)
                if remaining is not None and (bound is None or remaining < bound):
                    # the phase was cut short to the request's deadline: the total fired
                    return SIETimeoutError("total", self.timeouts.total, self.url, request=request,
                                           may_have_run=may_have_run)
                return SIETimeoutError(kind, bound, self.url, request=request, may_have_run=may_have_run)
        detail = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, httpx.ConnectError):
            return SIEConnectionError(f"cannot reach SIE at {self.url}: {detail}", kind="connect", url=self.url)
        if isinstance(exc, httpx.WriteError):
            return SIEConnectionError(f"sending {request} to SIE failed: {detail}", kind="write", url=self.url)
        # ReadError, RemoteProtocolError, ...: the request went out, the answer broke off
        return SIEConnectionError(f"SIE's answer to {request} broke off: {detail}", kind="read", may_have_run=True,
                                  url=self.url)


class HTTPTransport(_HTTPBase):
    def __init__(self, url: str, api_key: str | None, timeouts: Timeouts, encoding: str):
        super().__init__(url, api_key, timeouts, encoding)
        self._client = httpx.Client(base_url=self.url, timeout=timeouts.phases(None), headers=self._headers)

    def request(self, method: str, path: str, body: Any = None, deadline: float | None = None) -> Any:
        content, timeout, remaining = self._attempt(method, path, body, deadline)
        try:
            with self._client.stream(method, path, content=content, timeout=timeout) as response:
                chunks = []
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    self._check_deadline(method, path, deadline)
        except httpx.TransportError as exc:
            raise self._failure(exc, method, path, remaining) from exc
        return _answer(response, b"".join(chunks))

    def close(self) -> None:
        self._client.close()


class AsyncHTTPTransport(_HTTPBase):
    def __init__(self, url: str, api_key: str | None, timeouts: Timeouts, encoding: str):
        super().__init__(url, api_key, timeouts, encoding)
        self._clients: PerLoop[httpx.AsyncClient] = PerLoop(
            lambda: httpx.AsyncClient(base_url=self.url, timeout=timeouts.phases(None), headers=self._headers))

    async def request(self, method: str, path: str, body: Any = None, deadline: float | None = None) -> Any:
        content, timeout, remaining = self._attempt(method, path, body, deadline)
        try:
            async with self._clients.get().stream(method, path, content=content, timeout=timeout) as response:
                chunks = []
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    self._check_deadline(method, path, deadline)
        except httpx.TransportError as exc:
            raise self._failure(exc, method, path, remaining) from exc
        return _answer(response, b"".join(chunks))

    async def close(self) -> None:
        """Close this loop's client; another running loop's client is closed on its own loop;
        those of closed loops are dropped (their loop cannot run the close)."""
        mine, others = self._clients.take_all()
        for loop, client in others:
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)
        if mine is not None:
            await mine.aclose()
