"""Errors the client raises. Server answers `{"error": {"code", "message"}}` become
`SIEError` with the HTTP status; embedded-mode engine errors map to the same
statuses the server would send, so handling code is the same in both modes."""

from __future__ import annotations

# error code -> the HTTP status the server answers with (docs/api.md): one table for all
from sie_contract.errors import STATUS_BY_CODE  # noqa: F401  (re-exported)


class SIEError(Exception):
    """An error answer from SIE (or the embedded engine).

    `status` is the HTTP status, `code` the machine code from docs/api.md
    (`invalid_request`, `model_not_found`, `overloaded`, ...), `retry_after` the
    seconds the server asked to wait (429/503), if any, and `reason` why a model
    failed to load (`not_found`, `out_of_memory`, ...), if that was the error.
    """

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None, *,
                 reason: str | None = None, retryable: bool | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.reason = reason
        self._retryable = retryable  # the server's word (`retryable` in the error body), when it gave one

    @property
    def retryable(self) -> bool:
        """Whether trying again later can succeed: 429 and 503 answers, unless the server
        said waiting will not help (a model whose weights cannot be found, say)."""
        if self._retryable is not None:
            return self._retryable
        return self.status in (429, 503)


class SIEConnectionError(SIEError):
    """No answer came from the server: it could not be reached (refused, unknown host), or the
    connection broke or timed out (`SIETimeoutError`) before an answer came.

    `kind` says where it failed: "connect" (the connection could not be opened), "write"
    (sending the request), "read" (waiting for or reading the answer), "pool" (no free
    connection in the client's pool), "total" (the request's total deadline). `may_have_run`
    is True when the whole request had gone out, so the server may have done the work (only
    then is a retry of a POST a choice: `RetryPolicy.retry_read_timeouts`).
    """

    def __init__(self, message: str, *, kind: str = "connect", may_have_run: bool = False,
                 url: str | None = None, code: str = "connection_error"):
        super().__init__(0, code, message)
        self.kind = kind
        self.may_have_run = may_have_run
        self.url = url

    def __str__(self) -> str:
        return self.message  # no HTTP status to show: the message says what failed

    @property
    def retryable(self) -> bool:
        return True


class SIETimeoutError(SIEConnectionError):
    """A timeout fired: `kind` names which (connect, write, read, pool or total) and
    `timeout_s` its bound; the message says both, and the request, e.g. "read timeout
    after 30 s waiting for SIE's answer to POST http://host:8080/v1/encode/model"."""

    _DOING = {"connect": "connecting to SIE for", "write": "sending", "read": "waiting for SIE's answer to",
              "pool": "waiting for a free connection for", "total": "(the request's total deadline, retries "
              "included) on"}

    def __init__(self, kind: str, timeout_s: float | None, url: str, *, request: str = "", may_have_run: bool):
        bound = f" after {timeout_s:g} s" if timeout_s is not None else ""
        target = request or url
        super().__init__(f"{kind} timeout{bound} {self._DOING[kind]} {target}", kind=kind,
                         may_have_run=may_have_run, url=url, code="timeout")
        self.timeout_s = timeout_s

    @property
    def retryable(self) -> bool:
        return self.kind != "total"  # the deadline is spent: trying again cannot finish in time
