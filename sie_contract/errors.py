"""Error codes and the HTTP status each is answered with (docs/api.md's table).

One table for the server's answers, the embedded transport (which raises what the
server would send) and the OpenAPI document."""

from __future__ import annotations

STATUS_BY_CODE: dict[str, int] = {
    "invalid_request": 400,
    "unsupported_task": 400,
    "unsupported_output": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "model_not_found": 404,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "payload_too_large": 413,
    "unsupported_media_type": 415,
    "overloaded": 429,
    "inference_failed": 500,
    "internal_error": 500,
    "not_ready": 503,
    "draining": 503,
    "model_load_failed": 503,
    "no_worker": 503,
    # queue mode (the router): the NATS server cannot take the request; a request delivered too often
    "queue_unavailable": 503,
    "dead_lettered": 503,
    "too_many_connections": 503,
    "deadline_exceeded": 504,
}

ERROR_CODES: tuple[str, ...] = tuple(STATUS_BY_CODE)


def status_of(code: str) -> int:
    """The HTTP status of an error code (500 for a code outside the contract)."""
    return STATUS_BY_CODE.get(code, 500)
