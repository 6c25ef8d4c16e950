"""Run the app until SIGTERM / SIGINT, then drain and exit cleanly.

On the signal: /readyz turns 503 and new work is answered 503 `draining` (so a
load balancer or the router moves on), every request already accepted is
finished and answered, then the listener closes and the engine shuts down.
Work still queued when `--drain-timeout` runs out is answered 503 `draining` with
Retry-After; a request whose body never finished arriving is not waited for. The
process exits at most `SHUTDOWN_EXTRA_S` after the drain timeout.
A second signal during the drain quits at once (Ctrl-C twice).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import access_log, heap
from .app import ANSWER_GRACE_S, create_app, drain
from .connections import ConnectionLimitedRunner
from .metrics import ServerMetrics
from .settings import ServerSettings
from .state import LIFECYCLE

if TYPE_CHECKING:  # torch: a split server's frontends never load the engine
    from sie_engine import Engine

log = logging.getLogger(__name__)

# Printed to stderr once the socket is bound; tools that start the server on
# port 0 read the real port from it.
LISTENING = "SIE listening on http://{host}:{port}"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def print_listening(host: str, port: int) -> None:
    """The LISTENING line, its newline in the same write: print() writes them apart, and with
    PYTHONUNBUFFERED each is a write of its own, so a log line of a split server's other process
    (they share the log) once landed between them and glued itself to the port."""
    sys.stderr.write(LISTENING.format(host=host, port=port) + "\n")
    sys.stderr.flush()
# After the drain: how long connections still writing an answer (to a slow reader) get
# before they are closed.
CLOSE_TIMEOUT_S = 5.0
# The most a shutdown takes beyond --drain-timeout: the 503s written, the engine's own drain,
# connections closed (docs/deploy.md; the chart's termination grace period covers it).
SHUTDOWN_EXTRA_S = 2 * ANSWER_GRACE_S + CLOSE_TIMEOUT_S
# What to do when the address cannot be bound, by errno.
_LISTEN_HINTS = {
    errno.EADDRINUSE: "another process is using it; stop that one or pick another --port (0: any free port)",
    errno.EACCES: "ports below 1024 need privileges; pick another --port",
    errno.EADDRNOTAVAIL: "--host is not an address of this machine (127.0.0.1: this machine only; 0.0.0.0: all)",
}


class CannotListen(Exception):
    """The server's address could not be bound; the message says why and what to do."""


def startup_summary(engine: Engine, settings: ServerSettings) -> str:
    """One line with what this server runs on and serves."""
    batches = engine.parallelism.batches
    side_by_side = f", {batches} batches side by side" if batches > 1 else ""
    host_cache = f"{engine.host_cache_bytes / 2**30:.1f} GiB" if engine.host_cache_bytes else "off"
    preload = ", ".join(settings.preload) or "none (models load on first use)"
    return (f"device {engine.device}{side_by_side}; memory budget {engine.budget_bytes / 2**30:.1f} GiB; "
            f"host cache {host_cache}; {len(engine.catalog)} models in the catalog; preloading {preload}")


async def serve(engine: Engine, settings: ServerSettings, metrics: ServerMetrics | None = None, *,
                announce: Callable[[str, int], None] | None = None, reuse_port: bool = False,
                card_admin: Any = None) -> int:
    """Serve until a stop signal, drain, and return the process exit code. A split server's
    frontend (server/split/frontend.py) shares the port (`reuse_port`) and tells its supervisor
    it listens (`announce`) instead of printing the address and the engine's summary, and changes
    runtime cards through the engine core (`card_admin`)."""
    app = create_app(engine, settings, metrics, card_admin)
    # handler_cancellation: a client that disconnects cancels its handler, and
    # with it the engine work queued for it.
    logger = logging.getLogger(access_log.LOGGER) if settings.access_log else None
    runner = ConnectionLimitedRunner(app, max_connections=settings.max_connections, handler_cancellation=True,
                                     access_log=logger, access_log_format=access_log.FORMAT,
                                     shutdown_timeout=CLOSE_TIMEOUT_S)
    await runner.setup()
    await _listen(runner, settings, reuse_port)
    host, port = runner.addresses[0][:2]
    consumer = None
    if settings.queue_url is not None:  # queue mode: pull the pool's stream besides serving HTTP
        from .queue import consumer as queue_consumer

        consumer = await queue_consumer.start(app, host, port)
    heap.freeze_long_lived()  # built: what exists now lives as long as the process (heap.py)
    if announce is not None:
        announce(host, port)
    else:
        print_listening(host, port)
        log.info("%s", startup_summary(engine, settings))
    max_wait = engine.max_queue_wait_s
    if settings.drain_timeout_s < max_wait:
        log.warning("--drain-timeout %gs is shorter than --max-queue-wait %gs: a drain may answer admitted work "
                    "503 draining; give it the queue wait plus a batch", settings.drain_timeout_s, max_wait)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, _quit_now, sig, app)
        log.info("stop signal: draining (up to %.0fs; Ctrl-C again to quit at once)", settings.drain_timeout_s)
        if consumer is not None:
            consumer.stop_pulling()  # what is still in the stream goes to the other engines
        finished = await drain(app, taken=consumer.settle if consumer is not None else None)
        if consumer is not None:  # the answers of the messages it held sent, and acked
            await consumer.close(ANSWER_GRACE_S)
        log.info("drained (%s); closing", "all answered" if finished else "timed out")
        _drop_unfinished_bodies(app)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        await runner.cleanup()
        log.info("listener closed")
    return 0


async def _listen(runner: web.AppRunner, settings: ServerSettings, reuse_port: bool = False) -> None:
    site = web.TCPSite(runner, settings.host, settings.port, backlog=2048, reuse_port=reuse_port or None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        hint = (_LISTEN_HINTS.get(exc.errno) if exc.errno is not None else None) or "check --host and --port"
        why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise CannotListen(f"cannot listen on {settings.host}:{settings.port}: {why}; {hint}") from exc


def _drop_unfinished_bodies(app: web.Application) -> None:
    """Requests whose body never finished arriving asked for nothing yet: end their handlers,
    so closing the connections does not wait for bodies that will not come."""
    waiting = app[LIFECYCLE].waiting_for_body()
    if waiting:
        log.info("closing %d connection(s) whose request body never finished arriving", len(waiting))
    for request in waiting:
        request.task.cancel()


def _quit_now(sig: int, app: web.Application) -> None:
    """A second stop signal during the drain: the operator does not want to wait."""
    log.warning("second %s: quitting now, %d accepted request(s) unanswered", signal.Signals(sig).name,
                app[LIFECYCLE].inflight)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(128 + sig)  # as a process killed by the signal would
