"""The engine-core process of a split server: the one Engine (pool, admission, scheduler,
inference) answering the frontends' calls on a ZMQ ROUTER socket.

    python -m sie_server.split.core SERVE-OPTIONS...   (started by the supervisor)

Each call runs as its own task on the engine's loop (as one request's handler does in one
process); a `Cancel` cancels it, as a client's disconnect cancels its handler, and a `Gone` from
the supervisor cancels every call of a frontend that died. The calls a frontend may make are
the Engine's methods the server uses (ASYNC_METHODS, SYNC_METHODS), a tokenizer function of a
compat route (`with_tokenizer`), and the admin API's changes of runtime cards: the core holds the
one CardAdmin (the config dir, the catalog), and a change is answered once every frontend says it
serves the new catalog (or ACK_TIMEOUT_S passed), so the next request to any frontend sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import zmq
import zmq.asyncio

from sie_contract import get as get_task
from sie_engine.card import parse_card
from sie_engine.errors import SIEError

from .. import heap
from ..card_admin import CardAdmin
from ..metrics import ServerMetrics
from ..metrics_hooks import SchedulerHooks
from ..settings import ServerSettings
from . import protocol
from .paths import READY_FD, USAGE_ERROR, SplitPaths, die_with_parent
from .wait_board import WaitBoard

log = logging.getLogger(__name__)

# What a frontend may ask of the engine (the Engine's methods the server's handlers call);
# the sync ones run on a worker thread, as the one-process handlers run them.
ASYNC_METHODS = frozenset({"run", "score_pairs", "status", "abort", "drain", "load", "set_cards", "remove_card"})
SYNC_METHODS = frozenset({"models", "model_info"})
ACK_TIMEOUT_S = 5.0  # a frontend that has not applied a catalog change by then is stuck or dying


class _PublishingHooks(SchedulerHooks):
    """The metrics' scheduler hooks, also publishing the scheduler's wait to the frontends
    (the scheduler computes `wait_s` just before it reports a queue's wait)."""

    def __init__(self, metrics: ServerMetrics, board: WaitBoard):
        super().__init__(metrics)
        self.board = board
        self.scheduler: Any = None

    def queue_wait(self, model_id: str, seconds: float) -> None:
        super().queue_wait(model_id, seconds)
        if self.scheduler is not None:
            self.board.publish(self.scheduler.wait_s, self.scheduler.admission.max_wait_s)


class EngineCore:
    def __init__(self, engine: Any, socket: zmq.asyncio.Socket, card_admin: CardAdmin):
        self.engine = engine
        self.socket = socket
        self.card_admin = card_admin
        self.calls: dict[tuple[bytes, int], asyncio.Task] = {}
        self._warm: dict[str, asyncio.Future] = {}
        self.frontends: set[bytes] = set()  # those that said hello and are not gone
        self._catalog_version = 0
        self._unacked: dict[int, tuple[set[bytes], asyncio.Future]] = {}  # version -> (frontends, all acked)

    async def serve(self) -> None:
        while True:
            identity, raw = await self.socket.recv_multipart()
            try:
                message = protocol.MESSAGES.decode(raw)
            except Exception:  # noqa: BLE001 - not from a frontend of this server: nothing to answer
                log.warning("engine core: dropped an undecodable message from %r", identity)
                continue
            if isinstance(message, protocol.Call):
                self._start(identity, message)
            elif isinstance(message, protocol.Cancel):
                call = self.calls.get((identity, message.id))
                if call is not None:
                    call.cancel()
            elif isinstance(message, protocol.Ack):
                self._acked(identity, message.version)
            else:
                gone = [task for (ident, _), task in self.calls.items() if ident == message.identity]
                for task in gone:
                    task.cancel()
                self.frontends.discard(message.identity)
                self._acked(message.identity, self._catalog_version)  # nobody left to wait for there
                log.warning("engine core: frontend %s is gone; %d of its call(s) cancelled",
                            message.identity.decode(), len(gone))

    def _start(self, identity: bytes, call: protocol.Call) -> None:
        key = (identity, call.id)
        if call.method == "hello":
            self.frontends.add(identity)  # told of catalog changes from now on
        task = asyncio.create_task(self._answer(identity, call))
        self.calls[key] = task
        task.add_done_callback(lambda _: self.calls.pop(key, None))

    async def _answer(self, identity: bytes, call: protocol.Call) -> None:
        try:
            value = await self._dispatch(call)
            reply = protocol.Reply(call.id, value=protocol.pack_value(value))
        except asyncio.CancelledError:
            return  # the frontend's client is gone: nobody reads an answer
        except SIEError as exc:
            reply = protocol.Reply(call.id, failure=protocol.failure_of(exc))
        except Exception as exc:  # as one process's middleware: logged, answered 500 without details
            log.exception("engine core: %s failed", call.method)
            failure = protocol.Failure("SIEError", f"internal error ({type(exc).__name__})")
            reply = protocol.Reply(call.id, failure=failure)
        await self.socket.send_multipart([identity, protocol.ENCODER.encode(reply)])

    async def _dispatch(self, call: protocol.Call) -> Any:
        args = list(call.args)
        if call.struct_task is not None:
            task = get_task(call.struct_task)
            if task is None:
                raise SIEError(f"the engine core has no task {call.struct_task!r} (a plug-in registered "
                               "in the frontends only)")
            args.append(task.msgpack_decoder.decode(call.struct))
        if call.method == "warm_up":
            return await self._warm_up(*args)
        if call.method == "with_tokenizer":  # (model, a server function's name, its arguments)
            model, name, *rest = args
            return await self.engine.with_tokenizer(self.engine.card(model), protocol.function_of(name), *rest)
        if call.method == "admin_apply":  # the cards as their dicts, checked by the frontend
            cards = [parse_card(entry, f"body[{i}]") for i, entry in enumerate(args[0])]
            changed = await self.card_admin.apply(cards)
            await self._publish_catalog()
            return changed
        if call.method == "admin_remove":
            restored = await self.card_admin.remove(*args)
            await self._publish_catalog()
            return restored
        if call.method in ASYNC_METHODS:
            return await getattr(self.engine, call.method)(*args, **call.kwargs)
        if call.method in SYNC_METHODS:
            return await asyncio.to_thread(getattr(self.engine, call.method), *args, **call.kwargs)
        if call.method == "hello":
            return self.facts()
        raise SIEError(f"the engine core has no call {call.method!r}")

    async def _warm_up(self, model: str) -> float:
        """Every frontend preloads (each one's readiness waits for it); the model warms once."""
        future = self._warm.get(model)
        if future is None:
            future = self._warm[model] = asyncio.ensure_future(self.engine.warm_up(model))
        return await asyncio.shield(future)

    def facts(self) -> dict[str, Any]:
        """What frontends read without a call: the engine's fixed settings and its catalog."""
        engine = self.engine
        return {"device": str(engine.device), "budget_bytes": engine.budget_bytes,
                "max_queue_wait_s": engine.max_queue_wait_s, **self.catalog_facts()}

    def catalog_facts(self) -> dict[str, Any]:
        """The catalog as a frontend keeps it: the cards, which score pairs, the runtime cards;
        its version counts this core's (this pid's) changes."""
        engine = self.engine
        return {"pid": os.getpid(), "version": self._catalog_version, "cards": list(engine.catalog),
                "scores_pairs": {card.id: _scores_pairs(engine, card.id) for card in engine.catalog},
                "runtime_cards": self.card_admin.cards(), "runtime_digests": self.card_admin.digests()}

    async def _publish_catalog(self) -> None:
        """Tell every frontend the catalog changed; return once each serves it (or ACK_TIMEOUT_S)."""
        self._catalog_version += 1
        version = self._catalog_version
        waiting = set(self.frontends)
        done = asyncio.get_running_loop().create_future()
        self._unacked[version] = (waiting, done)
        update = protocol.ENCODER.encode(protocol.CatalogUpdate(version, protocol.pack_value(self.catalog_facts())))
        try:
            for identity in list(waiting):
                await self.socket.send_multipart([identity, update])
            if waiting:
                await asyncio.wait_for(done, ACK_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("engine core: frontend(s) %s did not apply catalog %d within %.0f s",
                        sorted(i.decode() for i in waiting), version, ACK_TIMEOUT_S)
        finally:
            del self._unacked[version]

    def _acked(self, identity: bytes, version: int) -> None:
        for acked_version, (waiting, done) in self._unacked.items():
            if acked_version <= version:
                waiting.discard(identity)
                if not waiting and not done.done():
                    done.set_result(None)


def _scores_pairs(engine: Any, model: str) -> bool:
    try:
        return bool(engine.scores_pairs(model))
    except SIEError:
        return False


async def _preload(core: EngineCore, models: Sequence[str]) -> None:
    """Load and warm `--preload` before the frontends are told the core is up: a core that
    replaces a dead one serves at once what the first served (the frontends' own preload,
    which readiness waits for, then finds the models in). A failure is the frontends' to
    report and retry (app.py's preload)."""
    for model in models:
        try:
            await core.engine.load(model)
            await core._warm_up(model)
        except SIEError as exc:
            log.warning("engine core: preload of %s failed: %s", model, exc.message)
            return


async def run_core(args: Any, paths: SplitPaths) -> int:
    from sie_engine import Engine
    from sie_engine.validation import Limits

    from ..cli import serve_catalog
    from ..options import SERVE, targets

    values = vars(args)
    settings = ServerSettings(**targets(SERVE, values, "settings"))
    try:
        catalog = serve_catalog(args)
    except ValueError as exc:
        print(f"sie-server: {exc}", file=sys.stderr, flush=True)
        return USAGE_ERROR
    metrics = ServerMetrics()
    board = WaitBoard(paths.board)
    hooks = _PublishingHooks(metrics, board)
    try:
        engine = Engine(catalog, **targets(SERVE, values, "engine"), limits=Limits(**targets(SERVE, values, "limits")),
                        pool_events=metrics.pool_events, scheduler_events=hooks, loop=asyncio.get_running_loop())
    except ValueError as exc:  # an engine option the Engine refused, as cli.cmd_serve says it
        print(f"sie-server: {exc}", file=sys.stderr, flush=True)
        return USAGE_ERROR
    try:
        card_admin = CardAdmin(engine, settings.config_dir)  # the runtime cards, as admin.setup reads them
    except ValueError as exc:
        print(f"sie-server: {exc}", file=sys.stderr, flush=True)
        return USAGE_ERROR
    hooks.scheduler = engine.scheduler
    metrics.memory_budget.set(engine.budget_bytes)
    board.publish(engine.scheduler.wait_s, engine.max_queue_wait_s)

    context = zmq.asyncio.Context()
    socket = context.socket(zmq.ROUTER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(paths.engine_address)
    core = EngineCore(engine, socket, card_admin)
    heap.freeze_long_lived()  # built: what exists now lives as long as the process (heap.py)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await _preload(core, settings.preload)
    log.info("engine core ready (pid %d): %d models in the catalog", os.getpid(), len(engine.catalog))
    ready = int(os.environ[READY_FD])
    os.write(ready, b"1")
    os.close(ready)
    serving = asyncio.create_task(core.serve())
    await stop.wait()  # the supervisor stops the core after every frontend has drained
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    await engine.aclose()
    socket.close()
    context.term()
    log.info("engine core stopped")
    return 0


def main(argv: list[str]) -> int:
    from ..cli import parse

    args = parse(["serve", *argv])
    die_with_parent()
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s engine-core %(name)s: %(message)s")
    code = asyncio.run(run_core(args, SplitPaths.from_env()))
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)  # torch's interpreter teardown only delays the exit (cli.py says why)


if __name__ == "__main__":
    main(sys.argv[1:])
