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
    """The server could not be reached (refused, reset, timed out)."""

    def __init__(self, message: str):
        super().__init__(0, "connection_error", message)

    @property
    def retryable(self) -> bool:
        return True

