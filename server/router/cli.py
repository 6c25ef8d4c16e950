"""`sie-server router ...`: the command line of the model-affinity router.

server/cli.py calls `add_router_parser(subparsers)`; `python -m sie_server.router` works too.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from urllib.parse import urlsplit

from .config import PoolService, RouterConfig, StaticWorker

# The engine server reads the same variable (server/auth.py), so one Secret serves both.
API_KEYS_ENV = "SIE_API_KEYS"


def _static_worker(text: str) -> StaticWorker:
    """`URL` or `POOL=URL`."""
    pool, sep, url = text.partition("=")
    if not sep:
        pool, url = "", text
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"--worker {text!r}: expected [POOL=]http://HOST:PORT")
    return StaticWorker(url=url.rstrip("/"), pool=pool or None)


def _pool_service(text: str) -> PoolService:
    """`POOL=HOST:PORT` (a headless service: one DNS record per pod)."""
    pool, sep, target = text.partition("=")
    host, colon, port = target.rpartition(":")
    if not sep or not pool or not colon or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(
            f"--service {text!r}: expected POOL=HOST:PORT, e.g. "
            "gpu-l4=sie-engine-gpu-l4-headless.default.svc.cluster.local:8080")
    return PoolService(pool=pool, host=host, port=int(port))


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def add_router_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "router", help="model-affinity router in front of many engine workers",
        description="Route requests to engine workers by model affinity, hold them while a "
                    "pool has no ready worker, retry failures elsewhere.")
    add_router_arguments(p)
    p.set_defaults(func=run_router, handler=run_router)
    return p


def add_router_arguments(p: argparse.ArgumentParser) -> None:
    d = RouterConfig()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--worker", action="append", default=[], type=_static_worker,
                   metavar="[POOL=]URL", help="a worker; without POOL its /v1/status names it")
    p.add_argument("--service", action="append", default=[], type=_pool_service,
                   metavar="POOL=HOST:PORT",
                   help="a headless service whose DNS records are the pool's workers")
    p.add_argument("--pool", action="append", default=[], dest="pools", metavar="NAME",
                   help="a pool requests may name even while it has no worker")
    p.add_argument("--default-pool", default=None,
                   help="pool for requests without X-SIE-Pool (default: any pool)")
    p.add_argument("--hold-timeout", type=_positive(float), default=d.hold_timeout_s,
                   help="seconds to hold a request while its pool has no ready worker")
    p.add_argument("--retry-after", type=_positive(int), default=d.retry_after_s,
                   help="Retry-After (s) of the 503 sent when the hold times out")
    p.add_argument("--max-attempts", type=_positive(int), default=d.max_attempts)
    p.add_argument("--poll-interval", type=_positive(float), default=d.poll_interval_s)
    p.add_argument("--dns-refresh", type=_positive(float), default=d.dns_refresh_s)
    p.add_argument("--upstream-timeout", type=_positive(float), default=d.upstream_timeout_s)
    p.add_argument("--shutdown-timeout", type=_positive(float), default=60.0,
                   help="after SIGTERM, seconds to finish accepted requests")
    p.add_argument("--api-key", action="append", default=[], dest="api_keys",
                   help=f"accepted bearer key (also ${API_KEYS_ENV}, comma-separated)")
    p.add_argument("--api-key-file", type=Path, default=None, metavar="PATH",
                   help="file of accepted keys (one per line), re-read when it changes")
    p.add_argument("--log-level", default="INFO")


def config_from_args(args: argparse.Namespace) -> RouterConfig:
    env_keys = [k.strip() for k in os.environ.get(API_KEYS_ENV, "").split(",") if k.strip()]
    if not args.worker and not args.service:
        raise SystemExit("sie-server router: name workers with --worker or --service")
    if args.api_key_file is not None and not args.api_key_file.is_file():
        raise SystemExit(f"sie-server router: --api-key-file {args.api_key_file} does not exist")
    return RouterConfig(
        workers=tuple(args.worker), services=tuple(args.service), pools=tuple(args.pools),
        default_pool=args.default_pool, poll_interval_s=args.poll_interval,
        dns_refresh_s=args.dns_refresh, hold_timeout_s=args.hold_timeout,
        retry_after_s=args.retry_after, max_attempts=args.max_attempts,
        upstream_timeout_s=args.upstream_timeout,
        api_keys=frozenset([*args.api_keys, *env_keys]), api_key_file=args.api_key_file,
    )


def run_router(args: argparse.Namespace) -> int:
    from aiohttp import web

    from .app import create_router_app

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = config_from_args(args)
    web.run_app(create_router_app(config), host=args.host, port=args.port,
                shutdown_timeout=args.shutdown_timeout, access_log=None)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sie-server router")
    add_router_arguments(parser)
    return run_router(parser.parse_args(argv))
