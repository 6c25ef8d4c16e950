"""`sie-server`: `serve` (the engine server), `models` (list the catalog) and,
when the router package is present, `router`.

    sie-server serve [--host 127.0.0.1] [--port 8080] [--models DIR ...] [--preload ID ...]
                     [--model NAME=PATH ...] [--device auto|cpu|cuda] [--memory-budget SIZE]
                     [--api-key KEY ...] [--api-key-file PATH] [--pool NAME]
                     [--max-connections N] [--cors-origin ORIGIN ...] [--no-access-log] ...
    sie-server models [--models DIR ...] [--model NAME=PATH ...] [--json]

The options are declared in options.py (flag, check, default, `SIE_*` variable, help); a flag
wins over its variable, which wins over the default. Every value is checked before anything
heavy is imported: a mistake is one line and exit code 2. torch and the engine load only to
serve or to list models.
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
from typing import Any

from .options import CATALOG, SERVE, ArgumentParser, OptionError, add_arguments, resolve, targets

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def build_catalog(args: argparse.Namespace):
    """The catalog the options describe; ValueError names a bad directory, card or path, and a
    local directory (`--model`) whose config.json does not parse or names no supported family."""
    from sie_engine import Catalog

    catalog = Catalog() if args.no_builtin else Catalog.builtin()
    for directory in args.models:
        catalog.add_directory(directory)
    for name, path in args.model:
        if not Path(path).expanduser().is_dir():
            raise ValueError(f"--model {name}={path}: {path} does not exist (give a Hugging Face-layout directory)")
        catalog.add(local_card(name, path))
    return catalog


def local_card(name: str, path: str):
    """`card_from_local_dir`, with the checks its first load would make done now: config.json
    parses and the engine has a family for it (else the server would start and every request
    fail). ValueError: one line naming the option, the directory and what is wrong."""
    from sie_engine import card_from_local_dir
    from sie_engine.checkpoints import describe
    from sie_engine.errors import SIEError
    from sie_engine.models import family_for

    where = f"--model {name}={path}"
    root = Path(path).expanduser().resolve()
    try:
        card = card_from_local_dir(name, root)
        if card.weights.path is not None:
            family_for(describe(Path(card.weights.path)).config, card.family)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: {root / 'config.json'} is not valid JSON ({exc}); "
                         "a Hugging Face model directory has its config.json") from None
    except SIEError as exc:
        raise ValueError(f"{where}: {exc.message}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return card


def usage_error(message: str) -> int:
    """A mistake in the command line: one line on stderr, exit code 2 (as argparse's own)."""
    print(f"sie-server: {message}", file=sys.stderr)
    return 2


def add_serve_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve models over HTTP",
                              description="Serve models over HTTP. Every option also reads its environment "
                                          "variable; a flag wins over it.")
    add_arguments(p, SERVE)
    p.set_defaults(func=cmd_serve, options=SERVE)


def add_models_parser(subparsers) -> None:
    p = subparsers.add_parser("models", help="list the models the server would serve")
    add_arguments(p, CATALOG)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_models, options=CATALOG)


def cmd_models(args: argparse.Namespace) -> int:
    from sie_engine.weights import locate_weights

    from .hub_reach import HubProbe, listed

    try:
        catalog = build_catalog(args)
    except ValueError as exc:
        return usage_error(str(exc))
    rows, labels = [], []
    probe = HubProbe()  # asked once, only if some Hub model is not cached
    for c in catalog:
        where, label = listed(locate_weights(c), bool(c.weights.hub), probe)
        rows.append({"id": c.id, "tasks": list(c.tasks), "outputs": list(c.outputs), "dims": c.dims,
                     "max_seq_len": c.max_seq_len, "weights": where.source, "available": where.status,
                     "detail": where.detail, "description": c.description})
        labels.append(label)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max([len(r["id"]) for r in rows] + [2])
    shown = max([len(label) for label in labels] + [len("AVAILABLE")])
    print(f"{'ID':<{width}}  {'OUTPUTS':<24}  {'DIMS':>5}  {'AVAILABLE':<{shown}}  WEIGHTS")
    for r, label in zip(rows, labels):
        print(f"{r['id']:<{width}}  {','.join(r['outputs']):<24}  {str(r['dims'] or '-'):>5}  "
              f"{label:<{shown}}  {r['weights']}")
    return 0


class _EngineOptionError(Exception):
    """An engine option the Engine refused (a usage error, not a crash)."""


def serve_catalog(args: argparse.Namespace):
    """The catalog `serve` serves, with `--preload` / `--pin` checked against it and the
    runtime cards; ValueError: the one line of a usage error."""
    from .runtime_cards import RuntimeCards

    catalog = build_catalog(args)
    # read again when the app is made; read here so a bad file is the one line of a usage error
    runtime = {card.id for card in RuntimeCards(args.config_dir).load()}
    for flag, ids in (("--preload", args.preload), ("--pin", args.pin)):
        unknown = [m for m in ids if m not in catalog and m not in runtime]
        if unknown:
            raise ValueError(f"{flag} {', '.join(unknown)}: not in the catalog (sie-server models lists it)")
    return catalog


def _queue_problem(pool: str) -> str | None:
    """Why `--queue` cannot run with this `--pool` (it names the stream), or None."""
    import importlib.util

    from .queue.layout import check_pool

    try:
        check_pool(pool)
    except ValueError as exc:
        return f"--pool: {exc}"
    if importlib.util.find_spec("nats") is None:
        return "--queue needs the NATS client: pip install 'sie[queue]' (nats-py)"
    return None


def cmd_serve(args: argparse.Namespace) -> int:
    from .settings import ServerSettings

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.queue is not None:
        problem = _queue_problem(args.pool)
        if problem is None and args.frontends:
            problem = "--queue pulls work in a one-process server: leave out --frontends"
        if problem:
            return usage_error(problem)
    if args.frontends:  # the engine core checks the catalog options (a mistake: its one line, exit 2)
        return _serve_split(args, ServerSettings(**targets(SERVE, vars(args), "settings")))
    from sie_engine import Engine
    from sie_engine.validation import Limits

    from .metrics import ServerMetrics
    from .serve import CannotListen, serve

    try:
        catalog = serve_catalog(args)
    except ValueError as exc:
        return usage_error(str(exc))
    values = vars(args)
    settings = ServerSettings(**targets(SERVE, values, "settings"))
    metrics = ServerMetrics()

    async def run() -> int:
        # the engine schedules on the server's own loop (Engine's `loop`: one thread, not two
        # taking turns on the GIL), so it is built here, on that loop, and closed on it
        try:
            engine = Engine(catalog, **targets(SERVE, values, "engine"),
                            limits=Limits(**targets(SERVE, values, "limits")), pool_events=metrics.pool_events,
                            scheduler_events=metrics.scheduler_events, loop=asyncio.get_running_loop())
        except ValueError as exc:
            raise _EngineOptionError(str(exc)) from None
        try:
            return await serve(engine, settings, metrics)
        finally:
            await engine.aclose()

    served = False
    try:
        code, served = asyncio.run(run()), True
    except _EngineOptionError as exc:
        return usage_error(str(exc))
    except CannotListen as exc:
        print(f"sie-server: {exc}", file=sys.stderr)  # the one line: nothing was served
        code = 1
    if served:
        logging.getLogger("sie_server").info("engine closed")
    # Every request is answered and the engine is closed. Interpreter teardown of
    # torch / transformers takes seconds more (native, measured 2-5 s here) and
    # only delays the pod's exit, so skip it.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve_split(args: argparse.Namespace, settings) -> int:
    """`--frontends N`: a supervisor of N frontends and one engine core (server/split/), each
    started with the same serve options, so every process resolves them as this one did."""
    from .split.supervisor import serve_split

    argv = list(args.argv)
    options = argv[argv.index("serve") + 1:]
    try:
        code = serve_split(options, args.frontends, settings.host, settings.port, settings.drain_timeout_s)
    except OSError as exc:
        print(f"sie-server: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}", file=sys.stderr)
        code = 1
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="sie-server", description="SIE: the search inference engine server.")
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


def parse(argv: list[str] | None = None, environ: Any = os.environ) -> argparse.Namespace:
    """The command line with every option resolved (flag > environment > default) and checked;
    a mistake exits with one line and code 2 (argparse's own code for a bad command line)."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # a split server's children parse them again
    try:
        resolve(args, getattr(args, "options", ()), environ)
    except OptionError as exc:
        sys.exit(usage_error(str(exc)))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
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
