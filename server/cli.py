"""`sie-server`: `serve` (the engine server), `models` (list the catalog) and,
when the router package is present, `router`.

    sie-server serve [--host 127.0.0.1] [--port 8080] [--models DIR ...] [--preload ID ...]
                     [--model NAME=PATH ...] [--device auto|cpu|cuda] [--memory-budget SIZE]
                     [--api-key KEY ...] [--api-key-file PATH] [--pool NAME]
                     [--max-connections N] [--cors-origin ORIGIN ...] [--no-access-log] ...
    sie-server models [--models DIR ...] [--model NAME=PATH ...] [--json]

API keys also come from SIE_API_KEYS (comma-separated); the queue wait bound from
SIE_MAX_QUEUE_WAIT (seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MAX_QUEUE_WAIT_ENV = "SIE_MAX_QUEUE_WAIT"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _default_queue_wait() -> str:
    """SIE_MAX_QUEUE_WAIT, else 30 s (argparse checks a string default with the option's type)."""
    return os.environ.get(MAX_QUEUE_WAIT_ENV, "30")


def _model_spec(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--model takes NAME=PATH, got {text!r}")
    return name, path


def _size(text: str) -> int:
    from sie_engine import parse_bytes

    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_catalog_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", action="append", default=[], metavar="DIR",
                        help="a directory of model cards (YAML) served besides the built-in catalog; repeatable")
    parser.add_argument("--model", action="append", default=[], type=_model_spec, metavar="NAME=PATH",
                        help="serve a local Hugging Face-layout directory under NAME, without a card; repeatable")
    parser.add_argument("--no-builtin", action="store_true", help="do not serve the built-in catalog")


def build_catalog(args: argparse.Namespace):
    """The catalog the options describe; ValueError names a bad directory, card or path."""
    from sie_engine import Catalog, card_from_local_dir

    catalog = Catalog() if args.no_builtin else Catalog.builtin()
    for directory in args.models:
        catalog.add_directory(directory)
    for name, path in args.model:
        if not Path(path).expanduser().is_dir():
            raise ValueError(f"--model {name}={path}: {path} does not exist (give a Hugging Face-layout directory)")
        catalog.add(card_from_local_dir(name, path))
    return catalog


def usage_error(message: str) -> int:
    """A mistake in the command line: one line on stderr, exit code 2 (as argparse's own)."""
    print(f"sie-server: {message}", file=sys.stderr)
    return 2


def add_serve_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve models over HTTP", description="Serve models over HTTP.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0 for all interfaces)")
    p.add_argument("--port", type=int, default=8080, help="port (0: any free port, printed at start)")
    _add_catalog_options(p)
    p.add_argument("--preload", action="append", default=[], metavar="ID",
                   help="load this model before /readyz turns ready; repeatable")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--memory-budget", type=_size, default=None, metavar="SIZE",
                   help="memory for resident models, e.g. 8GiB (default: 90%% of the GPU, half the RAM on CPU)")
    p.add_argument("--host-cache", type=_size, default=None, metavar="SIZE",
                   help="host RAM that keeps evicted models warm for fast swap-in "
                        "(default: min(8GiB, 25%% of RAM) with CUDA, 0 on CPU)")
    p.add_argument("--api-key", action="append", default=[], metavar="KEY",
                   help="require `Authorization: Bearer KEY`; repeatable (also SIE_API_KEYS)")
    p.add_argument("--api-key-file", type=Path, default=None, metavar="PATH",
                   help="file of API keys, one per line; re-read when it changes")
    p.add_argument("--pool", default="default", help="the pool this server belongs to (reported to the router)")
    p.add_argument("--max-queued-tokens", type=int, default=1 << 20, metavar="N",
                   help="tokens a model may have queued before requests get 429")
    p.add_argument("--max-total-queued-tokens", type=int, default=1 << 22, metavar="N",
                   help="tokens all models together may have queued before requests get 429")
    p.add_argument("--max-queue-wait", type=_seconds, default=_default_queue_wait(), metavar="SECONDS",
                   help="admit a request only if the work queued before it finishes within this many seconds at "
                        "the measured throughput, else 429 at once with Retry-After (default 30; also "
                        f"{MAX_QUEUE_WAIT_ENV})")
    p.add_argument("--max-items", type=int, default=4096, metavar="N", help="items per request")
    p.add_argument("--max-body-bytes", type=_size, default=64 * 2**20, metavar="SIZE", help="request body limit")
    p.add_argument("--max-image-bytes", type=_size, default=20 * 2**20, metavar="SIZE",
                   help="encoded bytes per image item (more: 413)")
    p.add_argument("--max-image-pixels", type=int, default=50_000_000, metavar="N",
                   help="width x height per image, read from its header before decoding (more: 413)")
    p.add_argument("--image-formats", default="PNG,JPEG,WEBP,GIF,BMP", metavar="LIST",
                   help="comma-separated image formats Pillow may decode (others: 400)")
    p.add_argument("--max-connections", type=int, default=1024, metavar="N",
                   help="client connections served at once; more get 503 with Retry-After")
    p.add_argument("--probe-connections", type=int, default=16, metavar="N",
                   help="connections beyond --max-connections kept just long enough to answer /healthz and /readyz "
                        "(probes are answered even when the server is full)")
    p.add_argument("--head-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                   help="a request head must arrive whole within this long of its first byte, else the connection "
                        "is closed")
    p.add_argument("--keepalive-timeout", type=_seconds, default=15.0, metavar="SECONDS",
                   help="how long a connection may wait for its next request (a new one: for its first) before it "
                        "is closed")
    p.add_argument("--body-idle-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                   help="longest pause while a request body arrives (then 408 and the connection is closed)")
    p.add_argument("--body-timeout", type=_seconds, default=120.0, metavar="SECONDS",
                   help="longest time a whole request body may take to arrive (then 408)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser calls from this origin (CORS; off by default; '*' for any); repeatable")
    p.add_argument("--no-access-log", dest="access_log", action="store_false",
                   help="do not log one line per request (with its request id)")
    p.add_argument("--drain-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="after SIGTERM, how long accepted requests may take; those still queued then are "
                        "answered 503 draining (keep it above --max-queue-wait plus one batch)")
    p.add_argument("--tokenizer-threads", type=int, default=2, metavar="N",
                   help="threads that tokenise requests, beside the batches that run the models")
    p.add_argument("--cpu-batches", type=int, default=None, metavar="N",
                   help="batches run side by side on CPU, each on a share of torch's threads (default 2)")
    p.add_argument("--cuda-batches", type=int, default=None, metavar="N",
                   help="batches in flight on a GPU, each on a CUDA stream of its own, so one batch's host work "
                        "overlaps another's kernels (default 2)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_serve)


def add_models_parser(subparsers) -> None:
    p = subparsers.add_parser("models", help="list the models the server would serve")
    _add_catalog_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    from sie_engine.weights import locate_weights

    try:
        catalog = build_catalog(args)
    except ValueError as exc:
        return usage_error(str(exc))
    rows = []
    for c in catalog:
        where = locate_weights(c)
        rows.append({"id": c.id, "tasks": list(c.tasks), "outputs": list(c.outputs), "dims": c.dims,
                     "max_seq_len": c.max_seq_len, "weights": where.source, "available": where.status,
                     "detail": where.detail, "description": c.description})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max([len(r["id"]) for r in rows] + [2])
    print(f"{'ID':<{width}}  {'OUTPUTS':<24}  {'DIMS':>5}  {'AVAILABLE':<11}  WEIGHTS")
    for r in rows:
        print(f"{r['id']:<{width}}  {','.join(r['outputs']):<24}  {str(r['dims'] or '-'):>5}  "
              f"{r['available']:<11}  {r['weights']}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from sie_engine import Engine
    from sie_engine.validation import Limits

    from .auth import keys_from_env
    from .metrics import ServerMetrics
    from .serve import CannotListen, serve
    from .settings import ServerSettings

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        catalog = build_catalog(args)
    except ValueError as exc:
        return usage_error(str(exc))
    unknown = [m for m in args.preload if m not in catalog]
    if unknown:
        return usage_error(f"--preload {', '.join(unknown)}: not in the catalog (sie-server models lists it)")
    if args.api_key_file is not None and not args.api_key_file.is_file():
        return usage_error(f"--api-key-file {args.api_key_file} does not exist")
    settings = ServerSettings(
        host=args.host, port=args.port, api_keys=tuple(args.api_key) + keys_from_env(),
        api_key_file=args.api_key_file, preload=tuple(args.preload), pool=args.pool,
        max_body_bytes=args.max_body_bytes, drain_timeout_s=args.drain_timeout,
        max_connections=args.max_connections, cors_origins=tuple(args.cors_origin), access_log=args.access_log,
        probe_connections=args.probe_connections, head_timeout_s=args.head_timeout,
        keepalive_timeout_s=args.keepalive_timeout, body_idle_timeout_s=args.body_idle_timeout,
        body_timeout_s=args.body_timeout,
    )
    metrics = ServerMetrics()
    try:
        engine = Engine(
            catalog, device=args.device, memory_budget=args.memory_budget, host_cache=args.host_cache,
            max_queued_tokens=args.max_queued_tokens, max_total_queued_tokens=args.max_total_queued_tokens,
            max_queue_wait_s=args.max_queue_wait,
            limits=Limits(max_items=args.max_items, max_image_bytes=args.max_image_bytes,
                          max_image_pixels=args.max_image_pixels,
                          image_formats=tuple(f.strip().upper() for f in args.image_formats.split(",") if f.strip())),
            tokenizer_threads=args.tokenizer_threads,
            cpu_batches=args.cpu_batches,
            cuda_batches=args.cuda_batches,
            pool_events=metrics.pool_events, scheduler_events=metrics.scheduler_events,
        )
    except ValueError as exc:
        return usage_error(str(exc))
    served = False
    try:
        code, served = asyncio.run(serve(engine, settings, metrics)), True
    except CannotListen as exc:
        print(f"sie-server: {exc}", file=sys.stderr)  # the one line: nothing was served
        code = 1
    finally:
        engine.close()
    if served:
        logging.getLogger("sie_server").info("engine closed")
    # Every request is answered and the engine is closed. Interpreter teardown of
    # torch / transformers takes seconds more (native, measured 2-5 s here) and
    # only delays the pod's exit, so skip it.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sie-server", description="SIE: the search inference engine server.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_serve_parser(subparsers)
    add_models_parser(subparsers)
    try:  # the router lives in its own package; the engine server works without it
        from .router.cli import add_router_parser
    except ImportError:
        pass
    else:
        add_router_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, where it can be handled
        return code
    except BrokenPipeError:
        # `sie-server models | head`: the reader has what it wanted. Point stdout at
        # /dev/null so the interpreter's last flush does not fail again, and exit as
        # a process killed by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
