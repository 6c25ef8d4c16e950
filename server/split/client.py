"""`EngineClient`: what a frontend's app holds where one process holds its Engine.

It answers the Engine methods the server's handlers call: the work calls (`run`,
`score_pairs`, `with_tokenizer`) and the state calls (`status`, `abort`, `drain`...) cross to the
engine core as messages; what a handler reads without awaiting (the catalog, the deployment's
limits, a card, `refuse_if_overloaded`) is answered here from this frontend's own copy of the
catalog (parsed from the same options) and the wait board. A handler cancelled (its client
gone) sends `Cancel`, so the engine drops the work as one process does.

When the engine core dies the supervisor signals the frontends (`engine_lost`): every call
waiting for it is answered 503 `not_ready` with Retry-After, and so is new work until the new
core answers this frontend's hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Sequence
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from sie_engine.card import Catalog, ModelCard
from sie_engine.errors import ModelNotFound, SIEError
from sie_engine.types import ModelInfo

from ..errors import HTTPProblem
from . import protocol
from .paths import SplitPaths
from .wait_board import WaitBoard

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 2.0  # one hello's wait; a hello unanswered (a core still starting) is sent again
ENGINE_RETRY_AFTER_S = 5.0  # the 503's Retry-After while the engine core restarts


def engine_unavailable(why: str) -> HTTPProblem:
    return HTTPProblem("not_ready", f"{why}; retry after Retry-After seconds", retry_after=ENGINE_RETRY_AFTER_S)


class EngineClient:
    def __init__(self, limits: Any, paths: SplitPaths, identity: bytes):
        self.catalog = Catalog()  # the engine's, from its hello: one parse of the options, in the core
        self.limits = limits
        self.identity = identity
        self._paths = paths
        self._board = WaitBoard(paths.board)
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.IDENTITY, identity)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(paths.engine_address)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._facts: dict[str, Any] = {}
        self._up = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._background: set[asyncio.Task] = set()
        self.card_admin = CoreCardAdmin(self)  # the admin API's, over the core's one CardAdmin

    # ---- lifecycle ---------------------------------------------------------
    async def start(self) -> None:
        """Start reading replies and wait for the engine core's hello."""
        self._loop, self._loop_thread = asyncio.get_running_loop(), threading.get_ident()
        self._spawn(self._read())
        await self._hello()

    async def _hello(self) -> None:
        while True:
            try:
                facts = await self._send(protocol.Call(next(self._ids), "hello"), timeout=HELLO_TIMEOUT_S)
                break
            except asyncio.TimeoutError:
                continue
        self._serve_catalog(facts)
        self._up = True
        log.info("engine core (pid %s) answers", self._facts.get("pid"))

    def engine_lost(self) -> None:
        """The supervisor says the engine core died: its calls will never be answered."""
        self._up = False
        waiting = [f for f in self._pending.values() if not f.done()]
        for future in waiting:
            future.set_exception(engine_unavailable("the engine process stopped before answering this request "
                                                    "(it is being restarted)"))
        log.error("engine core lost: %d call(s) answered 503; waiting for the new one", len(waiting))
        self._spawn(self._hello())

    async def aclose(self) -> None:
        for task in list(self._background):
            task.cancel()
        self._socket.close()
        self._context.term()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _read(self) -> None:
        while True:
            raw = await self._socket.recv()
            reply = protocol.REPLIES.decode(raw)
            if isinstance(reply, protocol.CatalogUpdate):
                self._serve_catalog(protocol.unpack_value(reply.facts))
                await self._socket.send(protocol.ENCODER.encode(protocol.Ack(reply.version)))
                continue
            future = self._pending.get(reply.id)
            if future is not None and not future.done():
                future.set_result(reply)

    def _serve_catalog(self, facts: dict[str, Any]) -> None:
        """Serve the engine core's catalog (its hello's, or a CatalogUpdate's after an admin
        change), unless this frontend already serves a newer one of the same core (a hello
        answered after an update)."""
        current = (self._facts.get("pid"), self._facts.get("version", -1))
        if facts["pid"] == current[0] and facts["version"] < current[1]:
            return
        self.catalog = Catalog(facts["cards"])
        self._facts = {**self._facts, **facts}
        self.card_admin.mirror(facts["runtime_cards"], facts["runtime_digests"])

    # ---- calls -------------------------------------------------------------
    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if not self._up:
            raise engine_unavailable("the engine process is restarting")
        call_id = next(self._ids)
        struct = args[-1] if args and isinstance(args[-1], msgspec.Struct) else None
        if struct is not None and method == "run":  # the task's request struct, as the handler decoded it
            call = protocol.Call(call_id, method, list(args[:-1]), kwargs, struct_task=args[0],
                                 struct=msgspec.msgpack.encode(struct))
        else:
            call = protocol.Call(call_id, method, list(args), kwargs)
        return await self._send(call)

    async def _send(self, call: protocol.Call, timeout: float | None = None) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._pending[call.id] = future
        try:
            await self._socket.send(protocol.ENCODER.encode(call))
            reply = await asyncio.wait_for(future, timeout) if timeout is not None else await future
        except asyncio.CancelledError:
            with contextlib.suppress(zmq.ZMQError):  # the client is gone: the engine drops the work
                self._socket.send(protocol.ENCODER.encode(protocol.Cancel(call.id)), zmq.NOBLOCK)
            raise
        finally:
            self._pending.pop(call.id, None)
        if reply.failure is not None:
            raise protocol.error_of(reply.failure)
        return protocol.unpack_value(reply.value)

    def _blocking(self, method: str, *args: Any) -> Any:
        """A sync call from a worker thread (handlers run `models` / `model_info` off the loop)."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self._call(method, *args), self._loop).result()

    def _on_loop(self) -> bool:
        return threading.get_ident() == self._loop_thread

    # ---- the Engine's methods the server uses ------------------------------
    async def run(self, task: str, model: str, *args: Any, timeout: float | None = None,
                  pre_admitted: Any = None, **fields: Any) -> Any:
        return await self._call("run", task, model, *args, timeout=timeout, **fields)

    async def score_pairs(self, model: str, queries: Sequence[str], texts: Sequence[str], *,
                          truncate: bool | None = None, timeout: float | None = None, pre_admitted: Any = None) -> Any:
        return await self._call("score_pairs", model, list(queries), list(texts), truncate=truncate, timeout=timeout)

    async def status(self) -> Any:
        return await self._call("status")

    async def abort(self, message: str, retry_after: float = 5.0) -> int:
        return await self._call("abort", message, retry_after)

    async def drain(self) -> None:
        """Nothing to do here: this frontend has answered what it accepted, but its siblings may
        still wait for the engine, so the engine is not drained from one frontend; the supervisor
        stops the core once every frontend has drained (supervisor.py)."""

    async def load(self, model: str) -> None:
        await self._call("load", model)

    async def warm_up(self, model: str) -> float:
        return await self._call("warm_up", model)

    async def with_tokenizer(self, card: Any, fn: Any, *args: Any) -> Any:
        """`fn(tokenizer, *args)` on the engine's tokenizer pool: the function crosses by its name
        (a compat route's module-level function), its arguments as msgpack."""
        return await self._call("with_tokenizer", card.id, protocol.function_name(fn), *args)

    def refuse_if_overloaded(self, model: str | None = None, body_bytes: int | None = None) -> None:
        if not self._up:
            raise engine_unavailable("the engine process is restarting")
        self._board.refuse_if_overloaded()  # the full decision is the engine's admission

    @staticmethod
    def pre_admission_done(handle: Any) -> None:
        return None

    def card(self, model_id: str, precision: str | None = None) -> Any:
        card = self.catalog.get(model_id)
        if card is None:
            raise ModelNotFound(f"model {model_id!r} is not served here (GET /v1/models lists the served models)")
        return card

    def scores_pairs(self, model: str) -> bool:
        card = self.card(model)
        return "score" in card.tasks and bool(self._facts.get("scores_pairs", {}).get(card.id))

    def model_info(self, model: str) -> ModelInfo:
        """The engine's answer from a worker thread; on the loop (a compat handler asking for a
        model's outputs or window) what the card says, without waiting for the engine."""
        if not self._on_loop():
            return self._blocking("model_info", model)
        card = self.card(model)
        dims = {"dense": card.dims} if card.dims and "dense" in card.outputs else {}
        return ModelInfo(id=card.id, family=card.family, tasks=card.tasks, outputs=card.outputs, dims=dims,
                         matryoshka_dims=card.matryoshka_dims, max_seq_len=card.max_seq_len, state="available",
                         memory_bytes=0, description=card.description, modalities=card.modalities,
                         image_size=card.image_size)

    def models(self) -> list[ModelInfo]:
        if not self._on_loop():
            return self._blocking("models")
        return [self.model_info(card.id) for card in self.catalog]

    @property
    def budget_bytes(self) -> int:
        return int(self._facts.get("budget_bytes", 0))

    @property
    def max_queue_wait_s(self) -> float:
        return float(self._facts.get("max_queue_wait_s", float("inf")))

    @property
    def device(self) -> str:
        return str(self._facts.get("device", "?"))


class CoreCardAdmin:
    """A frontend's side of the engine core's CardAdmin (card_admin.py): the admin API reads the
    runtime cards from this frontend's mirror of them (kept with its catalog) and sends changes
    to the core, which answers once every frontend serves the changed catalog."""

    def __init__(self, client: EngineClient):
        self._client = client
        self._cards: dict[str, ModelCard] = {}
        self._digests: dict[str, str] = {}

    def mirror(self, cards: list[ModelCard], digests: dict[str, str]) -> None:
        self._cards = {card.id: card for card in cards}
        self._digests = dict(digests)

    def cards(self) -> list[ModelCard]:
        return list(self._cards.values())

    def get(self, model: str) -> ModelCard | None:
        return self._cards.get(model)

    def digests(self) -> dict[str, str]:
        return dict(self._digests)

    async def apply(self, cards: list[ModelCard]) -> list[str]:
        return await self._client._call("admin_apply", [card.to_dict() for card in cards])

    async def remove(self, model: str) -> bool:
        return await self._client._call("admin_remove", model)


__all__ = ["CoreCardAdmin", "EngineClient", "SIEError"]
