"""aiohttp's own answers to requests it cannot parse, in the contract's JSON shape.

aiohttp answers a malformed request (a bad method, a URL or header over its 8,190-byte line
limit, too many headers, a bad Content-Length) itself, before any handler or middleware,
with a text/plain 400 that quotes the request's bytes and names its versions in `Server`
(issue #30.8). `ContractErrors` is aiohttp's connection handler with that one answer
replaced: `{"error": {"code": "invalid_request", "message"}}`, 414 for a request line over
the limit and 431 for headers over it (RFC 9110 15.5.15, RFC 6585 5), 400 otherwise; the
message names the problem without echoing the request. aiohttp's own 500 (a handler bug
outside the middleware) becomes the contract's `internal_error`.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from .errors import HTTPProblem, error_body

# aiohttp's limit on the request line and on each header line (max_line_size, max_field_size).
LINE_LIMIT = 8190
# The Server header of every answer: the software, never its version or the runtime's.
SERVER_NAME = "sie"


def _problem(status: int, exc: BaseException | None, first_line_bytes: int) -> tuple[int, HTTPProblem]:
    if status >= 500:
        return 500, HTTPProblem("internal_error", "internal error while handling the request")
    if isinstance(exc, LineTooLong):
        if first_line_bytes > LINE_LIMIT:
            return 414, HTTPProblem("invalid_request", "the request line (method, URL, version) is longer than "
                                                       "8190 bytes; send long inputs in the body")
        return 431, HTTPProblem("invalid_request", "a request header is longer than 8190 bytes")
    if isinstance(exc, BadHttpMessage) and "too many headers" in str(exc.message).lower():
        return 431, HTTPProblem("invalid_request", "the request has too many headers")
    what = str(exc.message if isinstance(exc, BadHttpMessage) else (exc or "bad request")).split(":", 1)[0]
    return 400, HTTPProblem("invalid_request", f"malformed HTTP request ({what.strip() or 'bad request'})")


class ContractErrors(web.RequestHandler):
    """aiohttp's `RequestHandler`, answering parse errors in the contract's shape."""

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # aiohttp's own steps first: it logs (ClientErrorLogger keeps client errors to one line)
        # and refuses when part of an answer is already sent
        self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        transport = request.transport
        guard = transport.get_protocol() if transport is not None else None
        status, problem = _problem(status, exc, getattr(guard, "first_line_bytes", 0))
        response = web.json_response(error_body(problem, openai_shape=False), status=status,
                                     headers={"Server": SERVER_NAME})
        response.force_close()
        return response
