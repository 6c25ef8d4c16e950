"""`X-SIE-Timeout-Ms`, the client's deadline for one request: read the same way by the
engine's server and by the router (which passes what is left of it upstream)."""

from __future__ import annotations

import math

from aiohttp import web

from sie_engine.errors import InvalidRequest

TIMEOUT_HEADER = "X-SIE-Timeout-Ms"


def deadline_ms(request: web.BaseRequest) -> float | None:
    """The header in milliseconds (None: not sent); InvalidRequest (400) for NaN, infinities,
    zero or less, rather than a deadline silently dropped."""
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return None
    try:
        ms = float(raw)
    except ValueError:
        ms = math.nan
    if not math.isfinite(ms) or ms <= 0:
        raise InvalidRequest(f"{TIMEOUT_HEADER} must be a positive number of milliseconds, got {raw!r}",
                             field=TIMEOUT_HEADER)
    return ms
