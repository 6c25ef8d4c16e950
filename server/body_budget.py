"""One budget for every request body the server holds at once.

`--max-body-bytes` bounds one body; without a bound on all of them together, 40 uploads held
just under a 40 MiB limit pinned +1.6 GB (issue #30.5). `BodyBudget` counts the bytes of
every body while it arrives and until its request is answered (the parsed body lives as long
as its handler). A body that would pass the budget is refused 429 `overloaded` with
Retry-After: when its `Content-Length` is declared, before a byte of it is read; a chunked
one at the chunk that would pass it. The memory a slow uploader can pin is the budget, not
connections x body limit.

Shapes: `reserve(request, n)` adds n bytes to what `request` holds; `release(request)` gives
back all it holds (the middleware calls it once the answer is ready).
"""

from __future__ import annotations

from aiohttp import web

from .errors import HTTPProblem

# Bytes this request holds in the budget (a typed key where this aiohttp has them, as state.py's).
_RequestKey = getattr(web, "RequestKey", None)
_HELD = _RequestKey("sie_body_budget_held", int) if _RequestKey else "sie_body_budget_held"
# A client refused for the budget retries once bodies in flight are answered: about a second.
RETRY_AFTER_S = 1.0


class BodyBudget:
    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        self.used = 0

    def reserve(self, request: web.BaseRequest, nbytes: int) -> None:
        """Count `nbytes` more for `request`, or raise 429 `overloaded` (counting nothing)."""
        if nbytes <= 0:
            return
        if self.used + nbytes > self.limit:
            raise HTTPProblem("overloaded", f"the server holds {self.used} bytes of request bodies (its "
                                            f"--max-buffered-body-bytes is {self.limit}); retry after Retry-After "
                                            "seconds or send smaller requests", retry_after=RETRY_AFTER_S)
        self.used += nbytes
        request[_HELD] = request.get(_HELD, 0) + nbytes

    def release(self, request: web.BaseRequest) -> None:
        held = request.pop(_HELD, 0)
        self.used -= held


BODY_BUDGET = web.AppKey("body_budget", BodyBudget)


def budget_of(request: web.BaseRequest) -> BodyBudget | None:
    app = getattr(request, "app", None)  # a BaseRequest outside an Application has none
    return app.get(BODY_BUDGET) if app is not None else None
