"""CORS, off unless the operator names origins (`--cors-origin`), through aiohttp-cors.

Off (the default), answers carry no `Access-Control-*` header and no preflight route
exists, so browsers keep other sites' pages from calling the API with a user's network
position. On, `setup(app, origins)` gives every route aiohttp-cors's preflight (`OPTIONS`
with `Access-Control-Request-Method`) and its response headers: an allowed origin gets
`Access-Control-Allow-Origin` and the exposed headers on every answer. The middleware lets
a preflight from an allowed origin through without an API key (`is_preflight`), since
browsers never send credentials on one; a preflight from any other origin is an ordinary
request without a key (401).
"""

from __future__ import annotations

from aiohttp import web

ALLOWED_METHODS = ("GET", "POST")
ALLOWED_HEADERS = ("Authorization", "Content-Type", "Accept", "X-Request-Id", "X-SIE-Timeout-Ms")
EXPOSED_HEADERS = ("Retry-After", "X-Request-Id", "X-SIE-Queue-Ms", "X-SIE-Tokenize-Ms", "X-SIE-Inference-Ms",
                   "X-SIE-Total-Ms")
MAX_AGE_S = 600


def allowed_origin(request: web.BaseRequest, origins: tuple[str, ...]) -> str | None:
    origin = request.headers.get("Origin")
    if not origins or not origin:
        return None
    if "*" in origins:
        return "*"
    return origin if origin in origins else None


def is_preflight(request: web.BaseRequest, origins: tuple[str, ...]) -> bool:
    """A preflight from an allowed origin (any other OPTIONS is handled as any request)."""
    return (request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
            and allowed_origin(request, origins) is not None)


def setup(app: web.Application, origins: tuple[str, ...]) -> None:
    """CORS for every route `app` has now (call it once all routes are added)."""
    if not origins:
        return
    import aiohttp_cors  # only a server with CORS on needs it

    options = aiohttp_cors.ResourceOptions(allow_headers=ALLOWED_HEADERS, expose_headers=EXPOSED_HEADERS,
                                           allow_methods=ALLOWED_METHODS, max_age=MAX_AGE_S)
    cors = aiohttp_cors.setup(app, defaults={origin: options for origin in origins})
    for route in list(app.router.routes()):
        cors.add(route)


def add_vary(request: web.BaseRequest, response: web.StreamResponse, origins: tuple[str, ...]) -> None:
    """`Vary: Origin` where the answer depends on the origin (aiohttp-cors does not add it), so
    a cache never hands one origin's answer to another."""
    if origins and "*" not in origins and request.headers.get("Origin"):
        response.headers["Vary"] = "Origin"
