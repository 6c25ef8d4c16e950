"""The access log: one line per request on the `sie_server.access` logger.

aiohttp writes the line once the answer is sent. A request whose handler was cancelled
first (its client disconnected) gets no line from aiohttp, so the middleware writes one
with `log_cancelled`, in the same shape, with status 499 (nginx's "client closed request",
also the status its metrics count)."""

from __future__ import annotations

import logging

from aiohttp import web

LOGGER = "sie_server.access"
# Client, request line, status, bytes, seconds and the request id (the middleware
# sets X-Request-Id on every answer); headers such as Authorization never appear.
FORMAT = '%a "%r" %s %b %Tf request_id=%{X-Request-Id}o'


def log_cancelled(request: web.BaseRequest, request_id: str, seconds: float) -> None:
    major, minor = request.version
    logging.getLogger(LOGGER).info('%s "%s %s HTTP/%d.%d" 499 - %.6f request_id=%s', request.remote,
                                   request.method, request.path_qs, major, minor, seconds, request_id)
