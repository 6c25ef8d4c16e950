"""Engine error codes -> HTTP statuses, and the two error body shapes.

SIE routes answer `{"error": {"code", "message"}}`; `/v1/embeddings` answers
OpenAI's `{"error": {"message", "type", "param", "code"}}` so OpenAI clients
raise their usual exceptions. The table is docs/api.md's.
"""

from __future__ import annotations

import math

from sie_contract.errors import STATUS_BY_CODE, status_of  # noqa: F401  (the table, re-exported for the docs test)
from sie_engine.errors import SIEError

from .redact import public_text

# OpenAI's `type` per status class, so its client maps errors to its exception classes.
OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
                405: "invalid_request_error", 408: "invalid_request_error",
                413: "invalid_request_error", 415: "invalid_request_error", 429: "rate_limit_error"}


class HTTPProblem(SIEError):
    """An error the HTTP layer itself raises (auth, routing, draining)."""

    def __init__(self, code: str, message: str, retry_after: float | None = None, field: str | None = None):
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after
        self.field = field


def status_for(error: SIEError) -> int:
    return status_of(error.code)


def retryable(error: SIEError) -> bool:
    """Whether the same request can succeed later: 429 and 503 answers are, unless the
    error says waiting will not help (a model whose weights are missing, say)."""
    return status_for(error) in (429, 503) and getattr(error, "retryable", True)


def retry_after_header(error: SIEError) -> str | None:
    """Whole seconds (at least 1) for retryable 429 / 503 answers; none for the others,
    so clients that honour Retry-After do not wait for what will not change."""
    if status_for(error) in (429, 503) and not retryable(error):
        return None
    seconds = getattr(error, "retry_after", None)
    if seconds is None and status_for(error) in (429, 503):
        seconds = 1.0
    return None if seconds is None else str(max(1, math.ceil(seconds)))


def retry_headers(error: SIEError) -> dict[str, str]:
    """`Retry-After` for what waiting can fix; for a 429 / 503 that waiting will not fix,
    `X-Should-Retry: false`, which OpenAI's clients obey instead of retrying 5xx."""
    retry_after = retry_after_header(error)
    if retry_after is not None:
        return {"Retry-After": retry_after}
    if status_for(error) in (429, 503):
        return {"X-Should-Retry": "false"}
    return {}


def public(error: SIEError) -> SIEError:
    """The error as a client may see it: its message without file-system paths (redact.py)."""
    message = public_text(error.message)
    if message == error.message:
        return error
    # a copy (the engine may hand the same error to many requests), made without __init__,
    # whose arguments differ between error classes
    shown = type(error).__new__(type(error), message)
    shown.__dict__.update(vars(error))
    shown.message = message
    return shown


def error_body(error: SIEError, openai_shape: bool) -> dict:
    error = public(error)
    if openai_shape:
        status = status_for(error)
        return {"error": {"message": error.message, "type": OPENAI_TYPES.get(status, "server_error"),
                          "param": getattr(error, "field", None), "code": error.code}}
    body: dict[str, str | bool] = {"code": error.code, "message": error.message}
    field = getattr(error, "field", None)
    if field:  # the offending request field (e.g. items[3].text), for clients that point at it
        body["field"] = field
    reason = getattr(error, "reason", None)
    if reason:  # why a model failed to load (not_found, out_of_memory, ...)
        body["reason"] = reason
    if status_for(error) in (429, 503):
        body["retryable"] = retryable(error)
    return {"error": body}
