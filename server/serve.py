"""Run the app until SIGTERM / SIGINT, then drain and exit cleanly.

On the signal: /readyz turns 503 and new work is answered 503 `draining` (so a
load balancer or the router moves on), every request already accepted is
finished and answered, then the listener closes and the engine shuts down.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from aiohttp import web

from sie_engine import Engine

from .app import create_app, drain
from .connections import ConnectionLimitedRunner
from .metrics import ServerMetrics
from .settings import ServerSettings

log = logging.getLogger(__name__)

# Printed to stderr once the socket is bound; tools that start the server on
# port 0 read the real port from it.
LISTENING = "SIE listening on http://{host}:{port}"
# Client, request line, status, bytes, seconds and the request id (the middleware
# sets X-Request-Id on every answer); headers such as Authorization never appear.
ACCESS_LOG_FORMAT = '%a "%r" %s %b %Tf request_id=%{X-Request-Id}o'


async def serve(engine: Engine, settings: ServerSettings, metrics: ServerMetrics | None = None) -> int:
    """Serve until a stop signal, drain, and return the process exit code."""
    app = create_app(engine, settings, metrics)
    # handler_cancellation: a client that disconnects cancels its handler, and
    # with it the engine work queued for it.
    access_log = logging.getLogger("sie_server.access") if settings.access_log else None
    runner = ConnectionLimitedRunner(app, max_connections=settings.max_connections, handler_cancellation=True,
                                     access_log=access_log, access_log_format=ACCESS_LOG_FORMAT,
                                     shutdown_timeout=10.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, backlog=2048)
    await site.start()
    host, port = runner.addresses[0][:2]
    print(LISTENING.format(host=host, port=port), file=sys.stderr, flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("stop signal: draining (up to %.0fs)", settings.drain_timeout_s)
        finished = await drain(app)
        log.info("drained (%s); closing", "all answered" if finished else "timed out")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        log.info("listener closed")
    return 0
