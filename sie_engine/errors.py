"""Errors the engine raises. Each carries a stable machine `code`; the server maps
codes to HTTP statuses, so the engine stays free of HTTP."""

from __future__ import annotations


class SIEError(Exception):
    code = "internal_error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidRequest(SIEError):
    code = "invalid_request"

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class PayloadTooLarge(InvalidRequest):
    code = "payload_too_large"


class UnsupportedTask(InvalidRequest):
    code = "unsupported_task"


class UnsupportedOutput(InvalidRequest):
    code = "unsupported_output"


class ModelNotFound(SIEError):
    code = "model_not_found"


# Load failures that waiting does not fix: the files, their architecture or their
# contents must change first. Callers fail at once instead of retrying them.
PERMANENT_LOAD_FAILURES = frozenset({"not_found", "unsupported_architecture", "invalid_weights"})


class ModelLoadFailed(SIEError):
    """A model could not be loaded. `reason` is one of not_found, out_of_memory,
    unsupported_architecture, invalid_weights, error.

    `retryable` says whether trying again later can succeed: false for the reasons in
    PERMANENT_LOAD_FAILURES and for a model larger than the whole memory budget; true
    for what may pass (memory held by other models, an unexpected error)."""

    code = "model_load_failed"

    def __init__(self, model: str, reason: str, detail: str, retry_after: float = 0.0,
                 retryable: bool | None = None):
        super().__init__(f"model {model!r} failed to load ({reason}): {detail}")
        self.model = model
        self.reason = reason
        self.detail = detail
        self.retry_after = retry_after
        self.retryable = reason not in PERMANENT_LOAD_FAILURES if retryable is None else retryable


class Overloaded(SIEError):
    code = "overloaded"

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class Draining(SIEError):
    code = "draining"

    def __init__(self, message: str = "the engine is draining and accepts no new work", retry_after: float = 5.0):
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineExceeded(SIEError):
    code = "deadline_exceeded"


class InferenceFailed(SIEError):
    code = "inference_failed"


class UnsupportedArchitecture(SIEError):
    code = "unsupported_architecture"


class WeightsNotFound(SIEError):
    code = "weights_not_found"
