"""What clients cause is not a server error: log it briefly, and never in a flood.

- `ClientErrorLogger` is the logger aiohttp's connection handler gets. aiohttp logs a
  malformed request, a broken body or a reset with `logger.exception` (ERROR and a
  traceback); those are the client's doing, so they become one WARNING line without a
  traceback. Anything else stays an ERROR with its traceback.
- `limit_accept_errors(loop)`: when accept() fails for lack of file descriptors, asyncio
  logs the error with a traceback once per connection waiting in the backlog, every
  second (166 MB of log in 33 s under a flood); this keeps one line per interval,
  with the count of those left out.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

SERVER_LOGGER = "aiohttp.server"
ACCEPT_ERROR = "socket.accept() out of system resource"
ACCEPT_LOG_INTERVAL_S = 10.0
# Errors a client causes: a malformed request, a broken or truncated body, a reset.
CLIENT_ERRORS = (HttpProcessingError, RequestPayloadError, ConnectionError, asyncio.IncompleteReadError)


class ClientErrorLogger:
    """The logger for aiohttp's `RequestHandler` (it calls `debug` and `exception`)."""

    def __init__(self, logger: logging.Logger | None = None):
        self._logger = logger or logging.getLogger(SERVER_LOGGER)

    def __getattr__(self, name: str):  # debug, info, warning, isEnabledFor, ...
        return getattr(self._logger, name)

    def exception(self, msg: str, *args, exc_info=True, **kwargs) -> None:
        error = exc_info if isinstance(exc_info, BaseException) else None
        if error is not None and isinstance(error, CLIENT_ERRORS):
            reason = " ".join(str(error).split()) or type(error).__name__
            self._logger.warning(msg + " (the client's: %s: %s)", *args, type(error).__name__, reason)
            return
        self._logger.error(msg, *args, exc_info=exc_info, **kwargs)


def limit_accept_errors(loop: asyncio.AbstractEventLoop, interval_s: float = ACCEPT_LOG_INTERVAL_S) -> None:
    """Log failed accepts (EMFILE and the like) at most once per `interval_s` on this loop."""
    previous = loop.get_exception_handler()
    log = logging.getLogger("sie_server.connections")
    last_logged = -float("inf")
    left_out = 0

    def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        nonlocal last_logged, left_out
        if context.get("message") != ACCEPT_ERROR:
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - last_logged < interval_s:
            left_out += 1
            return
        log.warning("cannot accept connections: %s (the open-file limit? lower --max-connections or raise "
                    "`ulimit -n`); %d more such errors in the last %gs not logged",
                    context.get("exception"), left_out, interval_s)
        last_logged, left_out = now, 0

    loop.set_exception_handler(handler)
