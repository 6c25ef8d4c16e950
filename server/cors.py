"""CORS, off unless the operator names origins (`--cors-origin`).

Off (the default), answers carry no `Access-Control-*` header, so browsers keep
other sites' pages from calling the API with a user's network position. On, an
allowed origin gets `Access-Control-Allow-Origin` on every answer, and its
preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered 204
without an API key, since browsers never send credentials on a preflight.
"""

from __future__ import annotations

from aiohttp import web

ALLOWED_METHODS = "GET, POST"
ALLOWED_HEADERS = "Authorization, Content-Type, Accept, X-Request-Id, X-SIE-Timeout-Ms"
EXPOSED_HEADERS = "Retry-After, X-Request-Id, X-SIE-Queue-Ms, X-SIE-Tokenize-Ms, X-SIE-Inference-Ms, X-SIE-Total-Ms"
MAX_AGE_S = "600"


def allowed_origin(request: web.BaseRequest, origins: tuple[str, ...]) -> str | None:
    origin = request.headers.get("Origin")
    if not origins or not origin:
        return None
    if "*" in origins:
        return "*"
    return origin if origin in origins else None


def is_preflight(request: web.BaseRequest, origins: tuple[str, ...]) -> bool:
    """A preflight from an allowed origin (any other OPTIONS gets the usual 405, with no CORS headers)."""
    return (request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
            and allowed_origin(request, origins) is not None)


def preflight() -> web.Response:
    return web.Response(status=204, headers={"Access-Control-Allow-Methods": ALLOWED_METHODS,
                                             "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                                             "Access-Control-Max-Age": MAX_AGE_S})


def add_headers(request: web.BaseRequest, response: web.StreamResponse, origins: tuple[str, ...]) -> None:
    origin = allowed_origin(request, origins)
    if origin is None:
        return
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
    if origin != "*":
        response.headers["Vary"] = "Origin"
