"""Errors the client raises. Server answers `{"error": {"code", "message"}}` become
`SIEError` with the HTTP status; embedded-mode engine errors map to the same
statuses the server would send, so handling code is the same in both modes."""

from __future__ import annotations


class SIEError(Exception):
    """An error answer from SIE (or the embedded engine).

    `status` is the HTTP status, `code` the machine code from docs/api.md
    (`invalid_request`, `model_not_found`, `overloaded`, ...), `retry_after` the
    seconds the server asked to wait (429/503), if any.
    """

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.status in (429, 503)


class SIEConnectionError(SIEError):
    """The server could not be reached (refused, reset, timed out)."""

    def __init__(self, message: str):
        super().__init__(0, "connection_error", message)

    @property
    def retryable(self) -> bool:
        return True


# Engine error code -> the HTTP status the server answers with (docs/api.md).
STATUS_BY_CODE = {
    "invalid_request": 400,
    "unsupported_task": 400,
    "unsupported_output": 400,
    "unauthorized": 401,
    "model_not_found": 404,
    "not_found": 404,
    "payload_too_large": 413,
    "overloaded": 429,
    "inference_failed": 500,
    "not_ready": 503,
    "draining": 503,
    "model_load_failed": 503,
    "no_worker": 503,
    "deadline_exceeded": 504,
}
