"""Engine error codes -> HTTP statuses, and the two error body shapes.

SIE routes answer `{"error": {"code", "message"}}`; `/v1/embeddings` answers
OpenAI's `{"error": {"message", "type", "param", "code"}}` so OpenAI clients
raise their usual exceptions. The table is docs/api.md's.
"""

from __future__ import annotations

import math

from sie_engine.errors import SIEError

STATUS_BY_CODE: dict[str, int] = {
    "invalid_request": 400,
    "unsupported_task": 400,
    "unsupported_output": 400,
    "unauthorized": 401,
    "model_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "overloaded": 429,
    "inference_failed": 500,
    "internal_error": 500,
    "not_ready": 503,
    "draining": 503,
    "model_load_failed": 503,
    "no_worker": 503,
    "too_many_connections": 503,
    "deadline_exceeded": 504,
}

# OpenAI's `type` per status class, so its client maps errors to its exception classes.
OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
                405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error"}


class HTTPProblem(SIEError):
    """An error the HTTP layer itself raises (auth, routing, draining)."""

    def __init__(self, code: str, message: str, retry_after: float | None = None, field: str | None = None):
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after
        self.field = field


def status_for(error: SIEError) -> int:
    return STATUS_BY_CODE.get(error.code, 500)


def retry_after_header(error: SIEError) -> str | None:
    """Whole seconds (at least 1) for 429 / 503 answers."""
    seconds = getattr(error, "retry_after", None)
    if seconds is None and status_for(error) in (429, 503):
        seconds = 1.0
    return None if seconds is None else str(max(1, math.ceil(seconds)))


def error_body(error: SIEError, openai_shape: bool) -> dict:
    if openai_shape:
        status = status_for(error)
        return {"error": {"message": error.message, "type": OPENAI_TYPES.get(status, "server_error"),
                          "param": getattr(error, "field", None), "code": error.code}}
    body = {"code": error.code, "message": error.message}
    field = getattr(error, "field", None)
    if field:  # the offending request field (e.g. items[3].text), for clients that point at it
        body["field"] = field
    return {"error": body}
