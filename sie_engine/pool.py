"""The model pool: models load on first use, stay resident while used, and the
least recently used are evicted when a memory budget would be exceeded.

Memory is charged per model as weight bytes plus an activation reserve sized by
the model's batch token budget (times the batches that may run at once), against a
budget in bytes (GPU memory on CUDA, a RAM budget on CPU). Before a load the weights
are estimated from the checkpoint's headers (each tensor's size in the dtype it will
be held in); once loaded, the model is charged what its tensors measure. An evicted
model kept warm in the host cache is copied there on a worker thread, never on the
event loop, and its memory stays charged until the copy is done; loads waiting for
room are served in arrival order.

"Used" is refreshed by every batch (`touch`), not only by loads. A model pinned by a
running batch is never evicted; a model with queued but not running work is evicted
only when no idle model can make room, and its queue simply waits for a reload (the
scheduler re-loads it when its turn comes), so no queued work is lost. A model loaded
for queued work is not evicted before a batch has run on it. Concurrent loads of one
model share one load. A failed load is remembered with its reason and retried after a
cool-down.

A model *pinned by its card* (`pinned: true`, or `--pin ID`) is never evicted: a load that
would need the memory pinned models hold is refused out_of_memory at once rather than left
waiting. A model with an idle limit (its card's `idle_evict_s`, else the server's
`--idle-evict-s`) is unloaded once no batch has run on it for that long: one timer task
(`watch_idle`) sleeps until the earliest such moment, so requests pay nothing for it. A model
whose card is replaced or removed at run time is *retired*: unloaded once no batch runs on it
and no work waits for it (a removed card keeps serving the work already queued for it).

A card's LoRA adapters (sie_engine/lora.py) are residents too: loaded on a request's first use
(on the load thread, over the loaded base model), charged the bytes their tensors measure, held
while a request uses them (`acquire_adapter` .. `release_adapter`) and otherwise evicted as models
are, least recently used first, against the same budget. Evicting a base model keeps its
adapters (they are tensors of their own, valid for its reload); retiring its card drops them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import torch

from .card import Catalog, ModelCard
from .checkpoints import CheckpointLayout
from .checkpoints import resolve as resolve_checkpoint
from .errors import ModelLoadFailed, ModelNotFound, SIEError, UnsupportedArchitecture, WeightsNotFound
from .host_cache import HostCache
from .layers.lora import LoRAAdapter
from .lora import adapter_dir, load_adapter
from .models import family_for
from .models.base import Family
from .runner import ModelRunner, batch_budget, build_runner, resolve_dtype
from .variants import PrecisionVariants
from .weights import loaded_nbytes

log = logging.getLogger(__name__)

# How often a retired model, or one idle-limited but busy, is looked at again: its work
# may go away without a batch ending (its clients gone), which wakes nothing.
RECHECK_S = 0.25


@dataclass
class Resident:
    runner: ModelRunner
    nbytes: int
    last_used: float
    fresh: bool = True  # loaded, and no batch has run on it yet
    # a generative model's KV cache for the sequences it runs now (generation/worker.py), beside
    # its weights: charged while they run, 0 once its decode batch is empty
    cache_bytes: int = 0

    @property
    def charged(self) -> int:
        return self.nbytes + self.cache_bytes


@dataclass
class ResidentAdapter:
    adapter: LoRAAdapter
    nbytes: int
    last_used: float


# an adapter's key in the pool: (the model it adapts, as the pool knows it, the adapter's name)
AdapterKey = tuple[str, str]


def _checkpoint_adapter(runner: ModelRunner, name: str) -> LoRAAdapter:
    """The adapter `name` the model's checkpoint holds (a card's `adapters: {x: {checkpoint: name}}`)."""
    adapter = runner.checkpoint_adapters.get(name)
    if adapter is None:
        held = ", ".join(runner.checkpoint_adapters) or "none"
        raise ValueError(f"the checkpoint holds no adapter {name!r} (it holds: {held})")
    return adapter


def adapter_label(key: AdapterKey) -> str:
    """How logs, reservations and errors name an adapter: `<model>+lora:<name>`."""
    return f"{key[0]}+lora:{key[1]}"


@dataclass
class LoadFailure:
    reason: str
    detail: str
    at: float
    retryable: bool = True


class PoolEvents:
    """Hooks for metrics; the server sets them. Defaults do nothing."""

    def loaded(self, model_id: str, nbytes: int, seconds: float) -> None: ...
    def load_failed(self, model_id: str, reason: str) -> None: ...
    def evicted(self, model_id: str) -> None: ...


def activation_reserve(batch_tokens: int, config: Mapping[str, Any], dtype: torch.dtype) -> int:
    """Bytes a batch of `batch_tokens` needs beyond the weights: hidden states, QKV,
    attention output and the MLP intermediate, held a few at a time."""
    hidden = int(config.get("hidden_size", 1024))
    intermediate = int(config.get("intermediate_size", 4 * hidden))
    per_token = 8 * hidden + 2 * intermediate
    return batch_tokens * per_token * torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class LoadPlan:
    """What a load needs, resolved once per card: its files and the bytes to make room for."""

    layout: CheckpointLayout
    weight_bytes: int  # estimated from the checkpoint's headers
    reserve: int  # activations of the batches that may run at once

    @property
    def need(self) -> int:
        return self.weight_bytes + self.reserve


class ModelPool:
    def __init__(
        self,
        catalog: Catalog,
        device: torch.device,
        budget_bytes: int,
        load_executor: Executor,
        has_work: Callable[[str], bool] = lambda model_id: False,
        events: PoolEvents | None = None,
        retry_cooldown_s: float = 30.0,
        builder: Callable[..., ModelRunner] = build_runner,
        host_cache_bytes: int = 0,
        on_load_done: Callable[[], None] = lambda: None,
        batches_in_flight: int = 1,
        variants: PrecisionVariants | None = None,
        pinned: Collection[str] = (),
        idle_evict_s: float | None = None,
    ):
        """has_work(model id): whether work waits for the model (the scheduler's view);
        on_load_done(): called after every load attempt, success or failure (the scheduler
        wakes on it); builder(card, layout, device): makes a ModelRunner (on the load thread);
        batches_in_flight: batches that may run at once (two of one model, say), each holding
        its activations; variants: the precision variants the engine made, which the pool loads
        and keeps by their names (`<id>@<precision>`) beside the catalog's models; pinned: model
        ids never evicted besides those whose card says `pinned`; idle_evict_s: the idle limit of
        cards that set none (None or 0: off)."""
        self.catalog = catalog
        self.variants = variants if variants is not None else PrecisionVariants()
        self.device = device
        self.budget_bytes = budget_bytes
        self._executor = load_executor
        self._has_work = has_work
        self.events = events or PoolEvents()
        self.retry_cooldown_s = retry_cooldown_s
        self._builder = builder
        self._resident: OrderedDict[str, Resident] = OrderedDict()  # LRU first
        self._loading: dict[str, asyncio.Task] = {}
        self._reserved: dict[str, int] = {}  # bytes held by loads in progress
        self._pins: dict[str, int] = {}
        self._failures: dict[str, LoadFailure] = {}
        self._room = asyncio.Condition()
        self._room_waiters = 0  # loads waiting for a pinned model to be released
        self._room_queue: deque[object] = deque()  # loads wanting room, in arrival order
        self.host_cache = HostCache(host_cache_bytes)
        self._plans: dict[str, LoadPlan] = {}  # resolved once per model
        self._on_load_done = on_load_done
        self.batches_in_flight = batches_in_flight
        # evicted models whose weights are still leaving (model id -> bytes still held, the move)
        self._evicting: dict[str, tuple[int, asyncio.Future]] = {}
        self.pinned_ids = frozenset(pinned)
        self.default_idle_evict_s = idle_evict_s
        self._retiring: set[str] = set()  # cards replaced or removed: unload once unused
        self._removed: dict[str, ModelCard] = {}  # removed cards whose queued work still runs
        self._stale_offloads: set[str] = set()  # offloads under way of retired weights: not kept
        self._idle_wake = asyncio.Event()
        self._adapters: OrderedDict[AdapterKey, ResidentAdapter] = OrderedDict()  # LRU first
        self._adapter_loads: dict[AdapterKey, asyncio.Task] = {}
        self._adapter_users: dict[AdapterKey, int] = {}  # requests holding an adapter

    # ---- state -------------------------------------------------------------
    def _known_card(self, model_id: str) -> ModelCard | None:
        return self.catalog.get(model_id) or self.variants.get(model_id) or self._removed.get(model_id)

    def card(self, model_id: str) -> ModelCard:
        card = self._known_card(model_id)
        if card is None:
            raise ModelNotFound(f"model {model_id!r} is not in the catalog (GET /v1/models lists the served models)")
        return card

    def state(self, model_id: str) -> str:
        if model_id in self._resident:
            return "loaded"
        if model_id in self._loading:
            return "loading"
        failure = self._failures.get(model_id)
        if failure and time.monotonic() - failure.at < self.retry_cooldown_s:
            return "failed"
        return "available"

    def failure(self, model_id: str) -> ModelLoadFailed | None:
        failure = self._failures.get(model_id)
        if failure is None or self.state(model_id) != "failed":
            return None
        remaining = self.retry_cooldown_s - (time.monotonic() - failure.at)
        return ModelLoadFailed(model_id, failure.reason, failure.detail, retry_after=max(1.0, remaining),
                               retryable=failure.retryable)

    def resident(self, model_id: str) -> ModelRunner | None:
        entry = self._resident.get(model_id)
        return entry.runner if entry else None

    def memory_bytes(self, model_id: str) -> int:
        """Bytes charged to a resident model: its weights and reserve, and its decode cache."""
        entry = self._resident.get(model_id)
        return entry.charged if entry else 0

    def charge_cache(self, model_id: str, nbytes: int) -> None:
        """A generative model's decode cache holds `nbytes` now (its worker says so each step).
        Loads that need room count it; it is not evicted meanwhile (its worker pins it)."""
        entry = self._resident.get(model_id)
        if entry is not None:
            entry.cache_bytes = nbytes

    @property
    def used_bytes(self) -> int:
        return (sum(r.charged for r in self._resident.values()) + sum(self._reserved.values())
                + self.evicting_bytes + self.adapter_bytes)

    @property
    def adapter_bytes(self) -> int:
        return sum(entry.nbytes for entry in self._adapters.values())

    def adapter_ids(self) -> list[AdapterKey]:
        """Resident adapters, least recently used first."""
        return list(self._adapters)

    @property
    def evicting_bytes(self) -> int:
        return sum(nbytes for nbytes, _ in self._evicting.values())

    def loaded_ids(self) -> list[str]:
        return list(self._resident)

    def param_count(self, model_id: str) -> float | None:
        """Parameters of a model whose weights were looked at: resident, or planned by a load
        (the scheduler's throughput prior before the model's first batch). None before that."""
        entry = self._resident.get(model_id)
        if entry is not None:
            return entry.runner.param_bytes / entry.runner.dtype.itemsize
        plan = self._plans.get(model_id)
        if plan is not None:
            return plan.weight_bytes / resolve_dtype(self.card(model_id).dtype, self.device).itemsize
        return None

    def is_pinned(self, model_id: str) -> bool:
        """Pinned by its card or by `--pin` (a precision variant as its model is)."""
        card = self._known_card(model_id)
        return self.variants.base_of(model_id) in self.pinned_ids or bool(card is not None and card.pinned)

    def idle_limit(self, model_id: str) -> float | None:
        """Seconds without a batch after which the model is unloaded; None: never."""
        card = self._known_card(model_id)
        limit = card.idle_evict_s if card is not None and card.idle_evict_s is not None else self.default_idle_evict_s
        return limit or None  # 0: never

    def _pinned_bytes(self, besides: str) -> tuple[int, list[str]]:
        held = [m for m in self._resident if m != besides and self.is_pinned(m)]
        return sum(self._resident[m].nbytes for m in held), held

    # ---- use ---------------------------------------------------------------
    def touch(self, model_id: str) -> None:
        entry = self._resident.get(model_id)
        if entry is not None:
            entry.last_used = time.monotonic()
            entry.fresh = False
            self._resident.move_to_end(model_id)

    def pin(self, model_id: str) -> None:
        """Hold a model resident while a batch runs on it (until `unpin`); pins count up."""
        self._pins[model_id] = self._pins.get(model_id, 0) + 1

    def unpin(self, model_id: str) -> None:
        self._pins[model_id] -= 1
        if not self._pins[model_id]:
            del self._pins[model_id]
            entry = self._resident.get(model_id)
            if entry is not None:  # idle from the end of its last batch, not its start
                entry.last_used = time.monotonic()
            self.wake_idle()
            # A load waiting for room gets it now, before the dispatcher can pin this model
            # again for its next batch (a busy model would otherwise keep the room forever
            # and starve the older request behind the load).
            victim = self._victim() if self._room_waiters else None
            if victim is not None:
                self._evict_victim(victim)  # wakes the waiters
            else:
                self.wake_room_waiters()

    def wake_room_waiters(self) -> None:
        """Loads waiting for room look again. Called when room may have appeared: a batch
        ended, a load ended (its reservation is gone; its model may be a candidate), a model
        was evicted, or the dispatcher went idle (a model loaded for work that then went
        away, its clients gone, is idle now: no batch end will ever free it)."""
        if self._room_waiters:
            asyncio.get_running_loop().create_task(self._notify_room())

    async def _notify_room(self) -> None:
        async with self._room:
            self._room.notify_all()

    # ---- load / evict ------------------------------------------------------
    async def get(self, model_id: str) -> ModelRunner:
        """The loaded model, loading it (once, shared) if needed."""
        runner = self.resident(model_id)
        if runner is not None:
            return runner
        failure = self.failure(model_id)
        if failure is not None:
            raise failure
        task = self._loading.get(model_id)
        if task is None:
            card = self.card(model_id)
            task = asyncio.get_running_loop().create_task(self._load(card))
            self._loading[model_id] = task

            def done(_task, m=model_id):
                self._loading.pop(m, None)
                self._on_load_done()

            task.add_done_callback(done)
        return await asyncio.shield(task)

    async def _load(self, card: ModelCard) -> ModelRunner:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        # A line before the (possibly long) load, so an operator sees what the server is doing.
        source = "the host cache" if card.id in self.host_cache else card.weights.describe()
        log.info("loading %s from %s", card.id, source)
        try:
            if card.id not in self._plans:
                self._plans[card.id] = await loop.run_in_executor(self._executor, self._plan, card)
            plan = self._plans[card.id]
            await self._make_room(card.id, plan.need)
            try:
                if card.id in self._evicting:  # its weights are still on their way to the host cache
                    await asyncio.shield(self._evicting[card.id][1])
                cached = self.host_cache.take(card.id)
                if cached is not None:
                    runner = await loop.run_in_executor(self._executor, cached.restore)
                else:
                    runner = await loop.run_in_executor(self._executor, self._builder, card, plan.layout, self.device)
            finally:
                self._reserved.pop(card.id, None)
                self.wake_room_waiters()
        except Exception as exc:  # every failure is reported per model, never raised past it
            raise self.record_failure(card.id, exc) from exc
        self._failures.pop(card.id, None)
        nbytes = runner.param_bytes + plan.reserve  # what the model measures, not the estimate
        self._resident[card.id] = Resident(runner, nbytes, time.monotonic())
        self.wake_idle()  # its idle limit, if any, starts now
        seconds = time.monotonic() - started
        self.events.loaded(card.id, nbytes, seconds)
        log.info("loaded %s (%.1f MiB charged) in %.2fs", card.id, nbytes / 2**20, seconds)
        return runner

    def record_failure(self, model_id: str, exc: BaseException) -> ModelLoadFailed:
        """Remember why a model could not load (retried after the cool-down); returns the error to raise."""
        failure = _classify(exc)
        self._failures[model_id] = LoadFailure(failure.reason, failure.detail, time.monotonic(), failure.retryable)
        self.events.load_failed(model_id, failure.reason)
        log.warning("load of %s failed (%s): %s", model_id, failure.reason, failure.detail)
        return ModelLoadFailed(model_id, failure.reason, failure.detail, retry_after=self.retry_cooldown_s,
                               retryable=failure.retryable)

    def _plan(self, card: ModelCard) -> LoadPlan:
        layout = resolve_checkpoint(card)
        dtype = resolve_dtype(card.dtype, self.device)
        element_size = torch.empty((), dtype=dtype).element_size()
        family: Family = family_for(layout.config, card.family)
        batch_tokens = batch_budget(card, family, self.device, dtype)
        # a family whose batches hold no transformer activations says what they hold
        one_batch = family.model_class.activation_bytes(batch_tokens, family.config_from_hf(layout.config), dtype)
        if one_batch is None:
            one_batch = activation_reserve(batch_tokens, layout.config, dtype)
        return LoadPlan(layout, loaded_nbytes(layout.weight_files, element_size), one_batch * self.batches_in_flight)

    async def _make_room(self, model_id: str, need: int) -> None:
        if need > self.budget_bytes:
            raise ModelLoadFailed(
                model_id, "out_of_memory",
                f"needs {need / 2**20:.0f} MiB but the whole memory budget is {self.budget_bytes / 2**20:.0f} MiB; "
                "raise --memory-budget (Engine(memory_budget=...)) to serve it",
                retryable=False,  # the budget is fixed for the process: no eviction makes room
            )
        held, pinned = self._pinned_bytes(besides=model_id)
        if need > self.budget_bytes - held:  # only unpinning makes room: waiting would be forever
            raise ModelLoadFailed(
                model_id, "out_of_memory",
                f"needs {need / 2**20:.0f} MiB but pinned models ({', '.join(pinned)}) hold {held / 2**20:.0f} MiB "
                f"of the {self.budget_bytes / 2**20:.0f} MiB memory budget, and pinned models are never evicted; "
                "unpin one (its card's pinned, --pin) or raise --memory-budget",
                retryable=False,
            )
        async with self._room:
            # first come, first served: a load that has waited gets the room before a newer one
            # (say, a reload of the busy model just evicted for it) can take it
            ticket = object()
            self._room_queue.append(ticket)
            try:
                while self._room_queue[0] is not ticket or self.used_bytes + need > self.budget_bytes:
                    victim = None
                    # only the first in line evicts, and not while enough is already leaving
                    if (self._room_queue[0] is ticket
                            and self.used_bytes - self.evicting_bytes + need > self.budget_bytes):
                        victim = self._victim()
                    if victim is None:
                        # only pinned models left (a batch's end evicts one), evictions still
                        # moving, or others ahead in line
                        self._room_waiters += 1
                        try:
                            await self._room.wait()
                        finally:
                            self._room_waiters -= 1
                        continue
                    self._evict_victim(victim)
                self._reserved[model_id] = need
            finally:
                self._room_queue.remove(ticket)
                self._room.notify_all()  # the next in line looks again

    def _victim(self) -> str | AdapterKey | None:
        """Least recently used unpinned model, preferring models with no queued work, or an
        adapter no request holds, whichever was used longer ago (an idle adapter goes before a
        model with queued work). A model loaded for queued work is not a candidate until a batch
        has run on it: two loads waiting for room would otherwise evict each other's fresh model
        forever."""
        candidates = [m for m, entry in self._resident.items()
                      if m not in self._pins and not self.is_pinned(m) and not (entry.fresh and self._has_work(m))]
        idle = [m for m in candidates if not self._has_work(m)]
        pick = idle or candidates
        model = pick[0] if pick else None  # _resident is in LRU order
        adapter = next((key for key in self._adapters if not self._adapter_users.get(key)), None)
        if adapter is not None and (model is None or not idle
                                    or self._adapters[adapter].last_used <= self._resident[model].last_used):
            return adapter
        return model

    def _evict_victim(self, victim: str | AdapterKey) -> None:
        if isinstance(victim, tuple):
            self.evict_adapter(victim)
        else:
            self.evict(victim)

    # ---- LoRA adapters -------------------------------------------------------
    async def acquire_adapter(self, model_id: str, name: str) -> LoRAAdapter:
        """The adapter `name` of `model_id`'s card, loaded (once, shared by concurrent first uses)
        if needed, and held (never evicted) until `release_adapter(model_id, name)`. Loading it
        loads the base model first: the adapter's modules and shapes are the backbone's."""
        key = (model_id, name)
        self._adapter_users[key] = self._adapter_users.get(key, 0) + 1
        try:
            if key not in self._adapters:
                task = self._adapter_loads.get(key)
                if task is None:
                    task = asyncio.get_running_loop().create_task(self._load_adapter(key))
                    self._adapter_loads[key] = task
                    task.add_done_callback(lambda done: self._adapter_loaded(key, done))
                await asyncio.shield(task)
            entry = self._adapters[key]
        except BaseException:
            self.release_adapter(model_id, name)
            raise
        entry.last_used = time.monotonic()
        self._adapters.move_to_end(key)
        return entry.adapter

    def _adapter_loaded(self, key: AdapterKey, done: asyncio.Task) -> None:
        self._adapter_loads.pop(key, None)
        if not done.cancelled():
            done.exception()  # read: a load whose requesters all left logs no "never retrieved" traceback

    def release_adapter(self, model_id: str, name: str) -> None:
        """A request no longer needs the adapter: it may be evicted (least recently used first)."""
        key = (model_id, name)
        users = self._adapter_users.get(key, 0) - 1
        if users > 0:
            self._adapter_users[key] = users
            return
        self._adapter_users.pop(key, None)
        entry = self._adapters.get(key)
        if entry is not None:
            entry.last_used = time.monotonic()
        self.wake_room_waiters()

    async def _load_adapter(self, key: AdapterKey) -> None:
        model_id, name = key
        label = adapter_label(key)
        source = self.card(model_id).adapters[name]
        runner = await self.get(model_id)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        log.info("loading LoRA adapter %s from %s", label, source.describe())
        try:
            if source.checkpoint:  # read with the model's weights: its host copy is the runner's
                adapter = _checkpoint_adapter(runner, source.checkpoint)
            else:
                root = await loop.run_in_executor(self._executor, adapter_dir, source, label)
                # read to host memory first: its bytes, measured, are what room is made for
                adapter = await loop.run_in_executor(self._executor, load_adapter, name, root, runner.backbone,
                                                     torch.device("cpu"), runner.dtype)
            await self._make_room(label, adapter.nbytes)
            try:
                if self.device.type != "cpu":
                    adapter = await loop.run_in_executor(self._executor, adapter.to, self.device)
            finally:
                self._reserved.pop(label, None)
                self.wake_room_waiters()
        except ModelLoadFailed:
            raise
        except Exception as exc:
            failure = _classify(exc)
            log.warning("load of LoRA adapter %s failed (%s): %s", label, failure.reason, failure.detail)
            raise ModelLoadFailed(model_id, failure.reason, f"LoRA adapter {name!r}: {failure.detail}",
                                  retryable=failure.retryable) from exc
        self._adapters[key] = ResidentAdapter(adapter, adapter.nbytes, time.monotonic())
        log.info("loaded LoRA adapter %s (%.2f MiB charged) in %.2fs", label, adapter.nbytes / 2**20,
                 time.monotonic() - started)

    def evict_adapter(self, key: AdapterKey) -> None:
        """Drop an adapter's tensors (a batch still running on them keeps its own references)."""
        if self._adapters.pop(key, None) is not None:
            log.info("evicted LoRA adapter %s", adapter_label(key))
            self._freed()

    def evict(self, model_id: str, keep_warm: bool = True) -> None:
        """Stop serving a model now. Weights the host cache keeps are offloaded on the load
        thread (a copy of up to gigabytes: never on the event loop) and stay charged until the
        copy is done; weights it does not keep (or `keep_warm=False`: stale weights) are dropped
        at once."""
        entry = self._resident.pop(model_id, None)
        if entry is None:
            return
        self.events.evicted(model_id)
        log.info("evicted %s", model_id)
        if not keep_warm or not self.host_cache.fits(entry.runner):
            entry.runner.release()  # drops the tensors' storage: no copy, nothing to wait for
            self._freed()
            return
        move = asyncio.get_running_loop().run_in_executor(self._executor, entry.runner.offload)
        self._evicting[model_id] = (entry.nbytes, move)
        move.add_done_callback(lambda done: self._offloaded(model_id, entry.runner, done))

    def _offloaded(self, model_id: str, runner: ModelRunner, move: asyncio.Future) -> None:
        del self._evicting[model_id]
        stale = model_id in self._stale_offloads
        self._stale_offloads.discard(model_id)
        if not stale and not move.cancelled() and move.exception() is None:
            self.host_cache.put(model_id, runner)
        else:
            runner.release()  # the offload failed: the model reloads from its checkpoint
        self._freed()

    # ---- cards changed at run time, idle limits ------------------------------
    def retire(self, model_id: str, removed: ModelCard | None = None) -> None:
        """The card of `model_id` was replaced, or removed (`removed`: the card, kept for the
        work already queued for it): its weights, and its precision variants', are unloaded once
        no batch runs on them and no work waits, and nothing of the old card is reused (load
        plan, failure, weights kept warm)."""
        def of_model(m: str) -> bool:
            return self.variants.base_of(m) == model_id

        if removed is not None:
            self._removed[model_id] = removed
        self._retiring.update(m for m in (*self._resident, *self._loading) if of_model(m))
        self._stale_offloads.update(m for m in self._evicting if of_model(m))
        for m in self.host_cache.ids():
            if of_model(m):
                self.host_cache.drop(m)
        for table in (self._plans, self._failures):
            for m in [m for m in table if of_model(m)]:
                del table[m]
        for key in [key for key in self._adapters if of_model(key[0])]:  # the new card may name other files
            self.evict_adapter(key)
        self.wake_idle()

    def forget_failures(self, reason: str) -> None:
        """Try again at once the loads that failed for `reason` (out_of_memory: a card was unpinned
        or removed, and the room it held may be there now)."""
        for model_id in [m for m, failure in self._failures.items() if failure.reason == reason]:
            del self._failures[model_id]

    def wake_idle(self) -> None:
        """`watch_idle` looks again (a model loaded or ended a batch, a card changed)."""
        self._idle_wake.set()

    def _busy(self, model_id: str) -> bool:
        return model_id in self._pins or model_id in self._loading or self._has_work(model_id)

    def sweep(self, now: float) -> float | None:
        """Unload retired models nothing uses any more and models idle past their limit;
        returns the seconds until the next may be due (None: nothing to watch)."""
        due: list[float] = []
        for model_id in list(self._retiring):
            if self._busy(model_id):
                due.append(RECHECK_S)
                continue
            self._retiring.discard(model_id)
            self.evict(model_id, keep_warm=False)
        for model_id in list(self._removed):
            if self._busy(model_id) or model_id in self._resident:
                due.append(RECHECK_S)
            else:
                del self._removed[model_id]
        for model_id, entry in list(self._resident.items()):
            limit = self.idle_limit(model_id)
            if limit is None or self.is_pinned(model_id):
                continue
            if self._busy(model_id):  # looked at again when its batch ends, or after its limit
                due.append(limit)
                continue
            left = entry.last_used + limit - now
            if left <= 0:
                log.info("unloading %s: idle for %.1fs (idle_evict_s %g)", model_id, now - entry.last_used, limit)
                self.evict(model_id)
            else:
                due.append(left)
        return min(due) if due else None

    async def watch_idle(self) -> None:
        """The idle timer: sleeps until the next model may be due (or a wake-up), then sweeps.
        Evicting drops references or hands the copy to the load thread: nothing heavy here."""
        while True:
            self._idle_wake.clear()
            try:
                delay = self.sweep(time.monotonic())
            except Exception:  # a fault in one sweep must not end idle eviction for good
                log.exception("idle sweep failed")
                delay = RECHECK_S
            try:
                await asyncio.wait_for(self._idle_wake.wait(), delay)
            except asyncio.TimeoutError:
                pass

    def _freed(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.wake_room_waiters()


def _corrupt_file_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged checkpoint raises: safetensors' header and length errors (not
    ValueErrors), and a broken pickle in a `.bin` file."""
    import pickle

    from safetensors import SafetensorError

    return SafetensorError, pickle.UnpicklingError, EOFError


_CORRUPT_FILE_ERRORS = _corrupt_file_errors()


def _classify(exc: BaseException) -> ModelLoadFailed:
    if isinstance(exc, ModelLoadFailed):
        return exc
    if isinstance(exc, (WeightsNotFound, FileNotFoundError)):
        reason = "not_found"
    elif isinstance(exc, UnsupportedArchitecture):
        reason = "unsupported_architecture"
    elif isinstance(exc, torch.OutOfMemoryError) or isinstance(exc, MemoryError):
        reason = "out_of_memory"
    elif isinstance(exc, (ValueError, *_CORRUPT_FILE_ERRORS)):
        reason = "invalid_weights"
    else:
        reason = "error"
    detail = exc.message if isinstance(exc, SIEError) else f"{type(exc).__name__}: {exc}"
    return ModelLoadFailed("?", reason, detail)
