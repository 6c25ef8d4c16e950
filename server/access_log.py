"""The access log: one line per request on the `sie_server.access` logger.

aiohttp's `AccessLogger` writes the line once the answer is sent, in `FORMAT`;
`QueryRedactingLogger` is that logger with one change: the request line's query values are
replaced by `REDACTED`, since a client may send a key as `?api_key=...` (issue #30.8) and
logs travel further than the server. A request whose handler was cancelled first (its client
disconnected) gets no line from aiohttp, so the middleware writes one with `log_cancelled`,
in the same shape, with status 499 (nginx's "client closed request", also the status its
metrics count)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote

from aiohttp import web
from aiohttp.web_log import AccessLogger

LOGGER = "sie_server.access"
# Client, request line, status, bytes, seconds and the request id (the middleware
# sets X-Request-Id on every answer); headers such as Authorization never appear.
FORMAT = '%a "%r" %s %b %Tf request_id=%{X-Request-Id}o'
REDACTED = "REDACTED"


def logged_target(request: web.BaseRequest) -> str:
    """The path, with every query value replaced by REDACTED (the names stay: they say what was sent)."""
    query = request.rel_url.raw_query_string
    if not query:
        return request.path
    names = [quote(name, safe="") for name, _ in parse_qsl(query, keep_blank_values=True)]
    return request.path + "?" + "&".join(f"{name}={REDACTED}" for name in names)


def request_line(request: web.BaseRequest) -> str:
    major, minor = request.version
    return f"{request.method} {logged_target(request)} HTTP/{major}.{minor}"


class QueryRedactingLogger(AccessLogger):
    """aiohttp's AccessLogger whose `%r` never holds query values."""

    def _format_line(self, request: web.BaseRequest, response: web.StreamResponse,
                     time: float) -> Iterable[tuple[str | tuple[str, str], str]]:
        line = list(super()._format_line(request, response, time))
        if request is None:
            return line
        # `%r`'s key is "first_request_line" (AccessLogger.LOG_FORMAT_MAP)
        return [(key, request_line(request) if key == self.LOG_FORMAT_MAP["r"] else value) for key, value in line]


def log_cancelled(request: web.BaseRequest, request_id: str, seconds: float) -> None:
    logging.getLogger(LOGGER).info('%s "%s" 499 - %.6f request_id=%s', request.remote, request_line(request),
                                   seconds, request_id)
