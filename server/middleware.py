"""The one middleware every request passes: request id, admission (API key,
draining), error bodies, timing headers and request metrics.

Handlers stay thin: they raise `SIEError`s (the engine's or the HTTP layer's)
and this turns each into its status, body shape and headers.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time

from aiohttp import web

from sie_engine.errors import ModelNotFound, SIEError
from sie_engine.types import Timings

from . import access_log, admin, codec, cors, slow_clients
from .body_budget import BODY_BUDGET
from .errors import HTTPProblem, error_body, public, retry_headers, status_for
from .parse_errors import SERVER_NAME
from .request_ids import fresh_hex
from .state import (
    API_KEYS,
    ENGINE,
    ERROR_CODE,
    LIFECYCLE,
    METRICS,
    MODEL_LABEL,
    PRE_ADMITTED,
    QUEUE_TAKEN_HEADER,
    QUEUE_TOKEN,
    SETTINGS,
    TIMINGS,
    WORK_ROUTES,
)
from .suggest import did_you_mean

log = logging.getLogger(__name__)

# Routes open without an API key: probes, scraping, the API description, and the
# router's status poll (it shows no more than /metrics does). Infinity's GET /health is one of
# them because Infinity leaves it open with --api-key set, so its users' probes send no key.
PUBLIC_ROUTES = frozenset({"healthz", "readyz", "metrics", "openapi", "status", "infinity_health"})
# Probes and scrapes are not counted in sie_requests_total (they would drown the signal).
UNCOUNTED_ROUTES = frozenset({"healthz", "readyz", "metrics", "infinity_health"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


# Paths of Weaviate's API: SIE and Weaviate both listen on 8080 by default, and a Weaviate
# client pointed at SIE shows only this answer's message.
_WEAVIATE_PATHS = ("/v1/meta", "/v1/.well-known/", "/v1/schema", "/v1/objects", "/v1/batch", "/v1/graphql",
                   "/v1/nodes")


def _http_exception_problem(exc: web.HTTPException, path: str = "") -> HTTPProblem:
    if exc.status == 404 and path.startswith(_WEAVIATE_PATHS):
        return HTTPProblem("not_found", f"no such route: {path} is Weaviate's API and this is an SIE server "
                                        "(both default to port 8080): run Weaviate or SIE on another port")
    if exc.status == 404:
        return HTTPProblem("not_found", "no such route (GET /openapi.json lists the routes)")
    if exc.status == 405:
        return HTTPProblem("method_not_allowed", f"method not allowed here; use {exc.headers.get('Allow', 'another')}")
    if exc.status == 413:
        return HTTPProblem("payload_too_large", "the request body is too large; split the items over several requests")
    return HTTPProblem("invalid_request", exc.reason or "bad request")


def _with_suggestion(request: web.Request, error: SIEError) -> SIEError:
    """A 404 for a model id in the path names the served ids it is close to (suggest.py)."""
    model = request.match_info.get("model")
    engine = request.app.get(ENGINE)
    if error.code != "model_not_found" or not model or engine is None:
        return error
    hint = did_you_mean(model, (card.id for card in engine.catalog))
    if not hint or hint in error.message:
        return error
    return ModelNotFound(error.message + hint)


def error_response(request: web.Request, error: SIEError, openai_shape: bool) -> web.Response:
    error = _with_suggestion(request, error)
    status = status_for(error)
    request[ERROR_CODE] = error.code
    # a compatibility API's route answers in its API's own shape (compat.foreign_errors), also
    # for what is refused before its handler runs
    foreign = getattr(request.match_info.handler, "error_shape", None)
    if foreign is not None:
        status, body = foreign(public(error), status)
        response = codec.response(codec.dumps(body, codec.JSON), codec.JSON, status)
    else:
        fmt = codec.JSON if openai_shape else codec.answer_format(request)
        response = codec.response(codec.dumps(error_body(error, openai_shape), fmt), fmt, status)
    response.headers.update(retry_headers(error))
    if status == 408:  # the body stopped arriving: this connection is of no more use
        response.force_close()
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="sie"'
    return response


def _admit(request: web.Request, route: str) -> None:
    if route in admin.ADMIN_ROUTES:  # the admin key, never the API key (admin.py)
        admin.admit(request)
        return
    keys = request.app[API_KEYS]
    if route not in PUBLIC_ROUTES and keys.enabled and not keys.check(request.headers.get("Authorization")):
        raise HTTPProblem("unauthorized", "missing or wrong API key: send `Authorization: Bearer <key>`")
    if route in request.app[WORK_ROUTES] and request.app[LIFECYCLE].draining and not _taken_from_queue(request):
        raise HTTPProblem("draining", "this server is shutting down and accepts no new work; retry on another",
                          retry_after=5.0)
    if route in request.app[WORK_ROUTES]:
        # more work queued than --max-queue-wait: 429 before the body is even read (issue #19)
        engine = request.app[ENGINE]
        model = request.match_info.get("model")
        if model in engine.catalog:
            request[MODEL_LABEL] = model
        # charged what its headers say it can cost (issue #30): its model and declared length
        request[PRE_ADMITTED] = engine.refuse_if_overloaded(  # handed to engine.run by the handler
            model if model in engine.catalog else None, request.content_length)


def _taken_from_queue(request: web.Request) -> bool:
    """Whether this is a message this engine's queue consumer already took from the stream."""
    token = request.app.get(QUEUE_TOKEN)
    sent = request.headers.get(QUEUE_TAKEN_HEADER, "").encode("utf-8", "surrogateescape")
    return token is not None and hmac.compare_digest(sent, token.encode())


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


@web.middleware
async def frame(request: web.Request, handler) -> web.StreamResponse:
    started = time.monotonic()
    route = request.match_info.route.name or "other"
    request_id = request.headers.get("X-Request-Id", "")
    if not _REQUEST_ID.match(request_id):
        request_id = fresh_hex()  # no syscall on the loop (request_ids.py)
    lifecycle = request.app[LIFECYCLE]
    metrics = request.app[METRICS]
    counted = False
    origins = request.app[SETTINGS].cors_origins
    slow_clients.request_started(request)  # the head is here: stop its timeout
    try:
        if cors.is_preflight(request, origins):  # aiohttp-cors answers it (cors.py); browsers send no key
            response = await handler(request)
        else:
            _admit(request, route)
            if route in request.app[WORK_ROUTES]:
                lifecycle.enter(request)
                metrics.inflight.inc()
                counted = True
            response = await handler(request)
    except SIEError as exc:
        response = error_response(request, exc, route == "embeddings")
    except web.HTTPException as exc:
        response = error_response(request, _http_exception_problem(exc, request.path), route == "embeddings")
        if "Allow" in exc.headers:  # a 405 says which methods the route takes
            response.headers["Allow"] = exc.headers["Allow"]
    except asyncio.CancelledError:
        # The client went away: its engine work is cancelled with this task.
        if route not in UNCOUNTED_ROUTES:
            metrics.requests.labels(request.get(MODEL_LABEL, ""), route, "499").inc()
        if request.app[SETTINGS].access_log:  # aiohttp logs only answered requests
            access_log.log_cancelled(request, request_id, time.monotonic() - started)
        raise
    except Exception as exc:  # a bug, not bad input: say so without leaking internals
        log.exception("unhandled error on %s %s (request %s)", request.method, request.path, request_id)
        response = error_response(
            request, HTTPProblem("internal_error", f"internal error ({type(exc).__name__}); request id {request_id}"),
            route == "embeddings")
    finally:
        slow_clients.request_finished(request)
        budget = request.app.get(BODY_BUDGET)
        if budget is not None:  # its body is parsed and handled: its bytes go back to the budget
            budget.release(request)
        if route in request.app[WORK_ROUTES]:
            # let in by _admit and undecided: not any more
            request.app[ENGINE].pre_admission_done(request.get(PRE_ADMITTED))
        if counted:
            lifecycle.leave(request)
            metrics.inflight.dec()
    _finish(request, response, request_id, route, time.monotonic() - started)
    return response


def _finish(request: web.Request, response: web.StreamResponse, request_id: str, route: str, total: float) -> None:
    """What every answer carries (request id, CORS, where its time went) and what it counts."""
    timings: Timings | None = request.get(TIMINGS)
    shown = timings or Timings()
    response.headers["X-Request-Id"] = request_id
    response.headers["Server"] = SERVER_NAME  # aiohttp's default names its and Python's versions (#30.8)
    origins = request.app[SETTINGS].cors_origins
    if origins:
        cors.add_vary(request, response, origins)
    if (response.status >= 500 and request.get(ERROR_CODE) not in (None, "internal_error")
            and route not in UNCOUNTED_ROUTES):
        # the access log has the status; this says why, under the same request id (probes
        # are left out: their answer says why, and /readyz is polled during every preload)
        log.log(logging.WARNING if response.status == 500 else logging.INFO, "request %s %s %s answered %d %s",
                request_id, request.method, request.path, response.status, request[ERROR_CODE])
    response.headers["X-SIE-Queue-Ms"] = _ms(shown.queue)
    response.headers["X-SIE-Tokenize-Ms"] = _ms(shown.tokenize)
    response.headers["X-SIE-Inference-Ms"] = _ms(shown.inference)
    response.headers["X-SIE-Total-Ms"] = _ms(total)
    if route not in UNCOUNTED_ROUTES:
        model = request.get(MODEL_LABEL, "")
        request.app[METRICS].observe_request(model, route, response.status, timings, total)
        if response.status in (429, 503, 504) and route in request.app[WORK_ROUTES]:
            request.app[METRICS].rejected.labels(model, request.get(ERROR_CODE, str(response.status))).inc()
