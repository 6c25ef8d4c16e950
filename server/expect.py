"""`Expect: 100-continue` answered after the checks a body cannot change (RFC 9110 10.1.1).

aiohttp's default expect handler sends "100 Continue" at once, so a client that declared a
100 MiB body, or sent no API key, uploaded it all before its 413 or 401 (issue #30.8). Here
the API key and the declared `Content-Length` are checked first: a request that would be
refused gets its refusal instead of "100 Continue" (and the connection closes, since the body
was never sent); any other `Expect` value is 417. aiohttp runs the expect handler before the
middleware, so these answers carry the contract's shape and the Server header themselves.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.web_urldispatcher import ResourceRoute

from .admin import ADMIN_ROUTES
from .errors import HTTPProblem, error_body, status_for
from .parse_errors import SERVER_NAME
from .runtime_cards import refusal
from .state import ADMIN, API_KEYS, SETTINGS

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _refusal(problem: HTTPProblem, status: int | None = None) -> web.Response:
    response = web.json_response(error_body(problem, openai_shape=False), status=status or status_for(problem),
                                 headers={"Server": SERVER_NAME})
    if response.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="sie"'
    response.force_close()  # the client holds its body back: the connection has no next request
    return response


def expect_handler(public_routes: frozenset[str]):
    """The expect handler for the app's routes (`public_routes` need no API key)."""

    async def handle(request: web.Request) -> web.Response | None:
        expect = request.headers.get("Expect", "")
        if request.version < (1, 1):
            return None  # HTTP/1.0 has no 100 Continue: the body comes without one
        if expect.lower() != "100-continue":
            return _refusal(HTTPProblem("invalid_request", f"Expect: {expect!r} is not supported (only "
                                                           "100-continue)", field="Expect"), status=417)
        keys = request.app[API_KEYS]
        route = request.match_info.route.name or "other"
        if route in ADMIN_ROUTES:  # the admin key, never the API key
            problem = refusal(request.app[ADMIN].keys, request.headers.get("Authorization"))
            if problem is not None:
                return _refusal(problem)
        elif route not in public_routes and keys.enabled and not keys.check(request.headers.get("Authorization")):
            return _refusal(HTTPProblem("unauthorized", "missing or wrong API key: send `Authorization: Bearer <key>`"))
        limit = request.app[SETTINGS].max_body_bytes
        if (request.content_length or 0) > limit:
            return _refusal(HTTPProblem("payload_too_large", f"the body is larger than {limit} bytes; split the "
                                                             "items over several requests"))
        await request.writer.write(CONTINUE)
        request.writer.output_size = 0  # as aiohttp's own handler: the answer has not started
        return None

    return handle


def install(app: web.Application, public_routes: frozenset[str]) -> None:
    """Give every route of `app` the expect handler. aiohttp takes one per route only as an
    argument of `add_route`; the compat APIs' routes are added elsewhere (compat.mount_api),
    so it is set here, once all routes exist."""
    handler = expect_handler(public_routes)
    for route in app.router.routes():
        if isinstance(route, ResourceRoute):
            route._expect_handler = handler  # the attribute add_route(expect_handler=) sets
