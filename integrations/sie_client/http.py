"""HTTP transports (sync and async) on httpx: one request in, the decoded answer
out, or an `SIEError` carrying the server's status, code, message and Retry-After."""

from __future__ import annotations

from typing import Any

import httpx

from . import wire
from .errors import SIEConnectionError, SIEError


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


def _answer(response: httpx.Response) -> Any:
    content_type = response.headers.get("Content-Type")
    if response.is_success:
        return wire.loads(response.content, content_type)
    code, message = "http_error", response.text[:500] or response.reason_phrase
    reason = retryable = None
    try:
        error = wire.loads(response.content, content_type)["error"]
        code = error.get("code") or error.get("type") or code
        message = error.get("message", message)
        reason, retryable = error.get("reason"), error.get("retryable")
    except Exception:  # not SIE's error shape (a proxy's HTML page): keep the raw text
        pass
    raise SIEError(response.status_code, code, message, _retry_after(response), reason=reason,
                   retryable=retryable if isinstance(retryable, bool) else None)


def _connection_error(url: str, exc: Exception) -> SIEConnectionError:
    return SIEConnectionError(f"cannot reach SIE at {url}: {type(exc).__name__}: {exc}")


class HTTPTransport:
    def __init__(self, url: str, api_key: str | None, timeout: float | None, encoding: str):
        self.url = url.rstrip("/")
        self.encoding = encoding
        self._content_type = wire.MSGPACK if encoding == "msgpack" else wire.JSON
        self._client = httpx.Client(base_url=self.url, timeout=timeout, headers=_headers(api_key, encoding))

    def request(self, method: str, path: str, body: Any = None) -> Any:
        content = wire.dumps(body, self._content_type) if body is not None else None
        try:
            response = self._client.request(method, path, content=content)
        except httpx.TransportError as exc:
            raise _connection_error(self.url, exc) from exc
        return _answer(response)

    def close(self) -> None:
        self._client.close()


class AsyncHTTPTransport:
    def __init__(self, url: str, api_key: str | None, timeout: float | None, encoding: str):
        self.url = url.rstrip("/")
        self.encoding = encoding
        self._content_type = wire.MSGPACK if encoding == "msgpack" else wire.JSON
        self._client = httpx.AsyncClient(base_url=self.url, timeout=timeout, headers=_headers(api_key, encoding))

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        content = wire.dumps(body, self._content_type) if body is not None else None
        try:
            response = await self._client.request(method, path, content=content)
        except httpx.TransportError as exc:
            raise _connection_error(self.url, exc) from exc
        return _answer(response)

    async def close(self) -> None:
        await self._client.aclose()
