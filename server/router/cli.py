"""`sie-server router ...`: the command line of the model-affinity router.

server/cli.py calls `add_router_parser(subparsers)`; `python -m sie_server.router` works too.
The options are declared in options.py; aiohttp and the app are imported only to serve, so
`--help` and argument errors answer at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from ..options import ArgumentParser, OptionError, add_arguments, resolve, targets
from .config import RouterConfig
from .options import ROUTER

log = logging.getLogger("sie_server.router")
# The one line logged once the socket is bound (aiohttp's banner is not printed).
LISTENING = "SIE router listening on http://{host}:{port}"


def add_router_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "router", help="model-affinity router in front of many engine workers",
        description="Route requests to engine workers by model affinity, hold them while a "
                    "pool has no ready worker, retry failures elsewhere. Every option also reads "
                    "its environment variable; a flag wins over it.")
    add_router_arguments(p)
    p.set_defaults(func=run_router, handler=run_router)
    return p


def add_router_arguments(p: argparse.ArgumentParser) -> None:
    add_arguments(p, ROUTER)


class RouterUsageError(SystemExit):
    """A router command line that cannot run; the message is the one line to print (run_router
    prints it and exits 2; a caller of `config_from_args` that does not catch it exits too)."""


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    """The RouterConfig of a parsed command line (flags, then SIE_ROUTER_* variables, then defaults)."""
    try:
        resolve(args, ROUTER)
    except OptionError as exc:
        raise RouterUsageError(str(exc)) from None
    values = targets(ROUTER, vars(args), "router")
    if values["queue_url"] is None and not args.workers and not args.services:
        raise RouterUsageError("name workers with --worker or --service (or a NATS server with --queue)")
    if values["queue_url"] is not None:
        _check_queue_pools(values)
    values["api_keys"] = frozenset(values["api_keys"])
    from ..runtime_cards import RuntimeCards

    try:  # a bad config dir is a usage error, before anything listens
        RuntimeCards(values["config_dir"]).load()
    except ValueError as exc:
        raise RouterUsageError(str(exc)) from None
    return RouterConfig(**values)


def _check_queue_pools(values: dict) -> None:
    from ..queue.layout import check_pool

    pools = set(values["pools"]) | ({values["default_pool"]} if values["default_pool"] else set())
    if not pools:
        raise RouterUsageError("--queue needs the pools to make streams for: --pool NAME (repeatable) or "
                               "--default-pool NAME")
    try:
        for pool in pools:
            check_pool(pool)
    except ValueError as exc:
        raise RouterUsageError(str(exc)) from None
    import importlib.util

    if importlib.util.find_spec("nats") is None:
        raise RouterUsageError("--queue needs the NATS client: pip install 'sie[queue]' (nats-py)")


def run_router(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except RouterUsageError as exc:
        print(f"sie-server router: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_serve(config, args.host, args.port, args.shutdown_timeout))
    except OSError as exc:  # the address cannot be bound: one line, as the engine server's
        why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        print(f"sie-server router: cannot listen on {args.host}:{args.port}: {why}", file=sys.stderr)
        return 1


async def _serve(config: RouterConfig, host: str, port: int, shutdown_timeout: float) -> int:
    """Serve until SIGTERM / SIGINT; then finish accepted requests (up to `shutdown_timeout`)."""
    from aiohttp import web

    from ..connections import ConnectionLimitedRunner
    from ..settings import ServerSettings
    from .app import create_router_app

    # the engine server's connection bounds, head / keep-alive / send timeouts, off-loop
    # inflation and quiet client-error and accept-error logs (issue #30.6)
    bounds = ServerSettings(max_connections=config.max_connections, probe_connections=config.probe_connections,
                            head_timeout_s=config.head_timeout_s, keepalive_timeout_s=config.keepalive_timeout_s,
                            send_timeout_s=config.send_timeout_s)
    # aiohttp's run_app would print its banner; one line of our own says where and what
    runner = ConnectionLimitedRunner(create_router_app(config), settings=bounds, access_log=None,
                                     shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound_host, bound_port = runner.addresses[0][:2]
    log.info("%s: %d static worker(s), %d service(s), pools %s, default pool %s",
             LISTENING.format(host=bound_host, port=bound_port), len(config.workers), len(config.services),
             ", ".join(sorted(config.known_pools())) or "(from the workers)", config.default_pool or "any")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()  # readiness 503, accepted requests finished, connections closed
        log.info("router stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="sie-server router")
    add_router_arguments(parser)
    return run_router(parser.parse_args(argv))
