"""`Engine`: SIE as a library. Async `encode` / `score` / `extract` with sync
wrappers, on top of the catalog, the model pool and the scheduler.

The engine runs its scheduler on an event loop of its own, in a background
thread, so it serves callers from any event loop (a notebook's) or from plain
threads; sie-server builds it on the server's own loop instead (`loop=`), so
HTTP and scheduling do not take turns across two threads. Tokenisation runs on a thread pool and inference on
inference threads (on CPU `cpu_batches`, default two, each batch on a share of
torch's threads; on CUDA `cuda_batches`, default two, each on a stream of its own);
neither blocks any event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sie_contract import registry as task_registry
from sie_contract.builtin import PRECISIONS
from sie_contract.tasks import FieldError, Task

from . import validation as v
from .admission import PendingCall, image_positions_bound, upper_bound_tokens
from .card import Catalog, ModelCard
from .checkpoints import CheckpointLayout
from .checkpoints import resolve as resolve_checkpoint
from .decode_admission import DecodeAdmission, DecodeTicket
from .errors import InvalidRequest, ModelNotFound, UnsupportedTask
from .generation.head import GenerationHead
from .generation.worker import DecodeWorker
from .handoff import BatchedHandoff
from .image_pool import IMAGE_THREADS
from .images import header_pixels
from .inference_threads import InferenceThreads
from .layers.lora import LoRAAdapter
from .models.base import CPU_FLOAT32_BATCH_TOKENS
from .parallelism import BatchParallelism
from .pool import ModelPool, PoolEvents
from .postprocess import Quantized
from .profiles import with_profile
from .runner import ModelRunner, build_runner, load_tokenizer
from .scheduler import Request, Scheduler, SchedulerEvents
from .sizes import parse_bytes
from .tasks import TaskRun
from .tasks import implementation as task_implementation
from .tasks.context import Call
from .tasks.generate import generated_tokens
from .tasks.score_pairs import run_pairs, scores_pairs
from .tokenizer import VocabularyLookup
from .types import EngineStatus, ModelInfo, ModelStatus, ScoreResult, SparseVector, Timings
from .variants import PrecisionVariants
from .videos import admission_pixels as video_admission_pixels
from .warmup import warm_up_fields
from .weights import WeightsLocation, locate_weights
from .work import WorkItem
from .worker_threads import worker_pool

log = logging.getLogger(__name__)

# The handle of a call a server let in before reading its body (`Engine.refuse_if_overloaded`):
# given to `Engine.run(..., pre_admitted=)`, which releases it once admission decides.
PreAdmitted = PendingCall

# seconds a model's weights location is trusted before it is looked up again
WEIGHTS_RECHECK_S = 10.0

def resolve_device(device: str | torch.device) -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for but torch sees no CUDA device")
    return device


def default_budget(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory * 0.9)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.5)


def default_host_cache(device: torch.device) -> int:
    if device.type == "cuda":
        return min(8 * 2**30, int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.25))
    return 0


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


class _Tokenizers:
    """One tokenizer per model, loaded once (shared by concurrent first requests) and kept
    across evictions: tokenizers are small and tokenising must not wait for weights.
    A precision variant shares its base model's (`PrecisionVariants.base_of`): the same checkpoint.
    A tokenizer that cannot load is a load failure of its model, recorded by the pool."""

    def __init__(self, executor, pool: ModelPool, variants: PrecisionVariants):
        self._executor = executor
        self._pool = pool
        self._variants = variants
        self._loaded: dict[str, VocabularyLookup] = {}
        self._loading: dict[str, asyncio.Future] = {}

    def loaded(self, model_id: str) -> VocabularyLookup | None:
        return self._loaded.get(self._variants.base_of(model_id))

    def forget(self, model_id: str) -> None:
        """Its card changed: the next request loads the tokenizer the new card names."""
        self._loaded.pop(model_id, None)

    async def get(self, card: ModelCard) -> VocabularyLookup:
        key = self._variants.base_of(card.id)
        tokenizer = self._loaded.get(key)
        if tokenizer is not None:
            return tokenizer
        failure = self._pool.failure(card.id) or self._pool.failure(key)
        if failure is not None:
            raise failure
        future = self._loading.get(key)
        if future is None:
            future = asyncio.get_running_loop().run_in_executor(self._executor, self._load, card)
            self._loading[key] = future
        try:
            loaded = await asyncio.shield(future)
        except Exception as exc:
            raise self._pool.failure(card.id) or self._pool.record_failure(card.id, exc) from exc
        finally:
            self._loading.pop(key, None)
        self._loaded[key] = loaded
        return loaded

    @staticmethod
    def _load(card: ModelCard) -> VocabularyLookup:
        return load_tokenizer(card, resolve_checkpoint(card))


@dataclass
class _Decoding:
    runner: ModelRunner
    worker: DecodeWorker


class Engine:
    """Serves the models of a catalog on one device.

    Example:
        engine = Engine()
        result = engine.encode_sync("sentence-transformers/all-MiniLM-L6-v2", ["hello"])
        vector = result.items[0].dense
    """

    def __init__(
        self,
        catalog: Catalog | None = None,
        *,
        device: str | torch.device = "auto",
        memory_budget: int | str | None = None,
        host_cache: int | str | None = None,
        max_queued_tokens: int = 1 << 20,
        max_total_queued_tokens: int = 1 << 22,
        # No wait bound in-process (embedded mode, a program's own Engine): its calls are the
        # only traffic and have no other replica to go to, so they wait their turn instead of
        # being refused. A server passes its --max-queue-wait (30 s by default).
        max_queue_wait_s: float = math.inf,
        limits: v.Limits = v.Limits(),
        tokenizer_threads: int = 2,
        cpu_batches: int | None = None,
        cuda_batches: int | None = None,
        pool_events: PoolEvents | None = None,
        scheduler_events: SchedulerEvents | None = None,
        load_retry_cooldown_s: float = 30.0,
        pinned: Sequence[str] = (),
        idle_evict_s: float | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        """pinned: model ids never evicted (besides cards that say `pinned`); idle_evict_s: seconds
        without a batch after which a model whose card sets no `idle_evict_s` is unloaded (None: never).

        loop: the event loop to schedule on. None (the default): a loop of its own in a
        background thread, so any caller's loop or thread can use the engine. A server passes
        its own loop, and must then build the engine on it (inside a coroutine) and end it with
        `aclose()`: HTTP and scheduling on one thread save two cross-thread wake-ups per request
        (issue 27: on one GIL two loops only took turns, and every hand-off between them cost
        a self-pipe write and a GIL switch)."""
        if loop is not None and loop is not _running_loop():
            raise ValueError("an Engine sharing a loop must be built on that loop, while it runs")
        self.catalog = catalog if catalog is not None else Catalog.builtin()
        self.variants = PrecisionVariants()  # the calls' precisions, by (model, precision): no catalog entries
        self.device = resolve_device(device)
        self.budget_bytes = parse_bytes(memory_budget) if memory_budget is not None else default_budget(self.device)
        # evicted models kept warm in host memory (see host_cache.py); CPU default 0: there
        # the budget already is RAM, and the operator opts in to spending more of it
        self.host_cache_bytes = parse_bytes(host_cache) if host_cache is not None else default_host_cache(self.device)
        self.limits = limits
        # torch gives a thread that never asked the thread count some thread set last, and the worker
        # threads set theirs: asked now, the caller's thread keeps what it has
        torch.get_num_threads()
        # worker threads never preempt the loop that hands them work (worker_threads.py)
        self._tokenize_pool = worker_pool(tokenizer_threads, "sie-tokenize")
        # tokenising and input preparation, their results handed back in batches (handoff.py)
        self._tokenize_calls = BatchedHandoff(self._tokenize_pool, tokenizer_threads)
        # batches side by side: on CPU on a share of torch's threads each, on CUDA on a stream
        # each, so one batch's host work overlaps the other's kernels (parallelism.py)
        self.parallelism = BatchParallelism.for_device(
            self.device, cpu_batches if self.device.type == "cpu" else cuda_batches)
        self._infer_pool = InferenceThreads(self.parallelism)
        self._load_pool = worker_pool(1, "sie-load")
        self._loop_thread = _LoopThread("sie-engine") if loop is None else None
        self.loop = loop if loop is not None else self._loop_thread.loop  # type: ignore[union-attr]
        self._closed = False
        self._locations: dict[str, tuple[float, WeightsLocation]] = {}
        # Models preloaded (`load`): admitted about one batch at a time until measured (_cold_batch).
        self._preloaded: set[str] = set()
        # generative models' decode workers, by model id (with the runner each was made for)
        self._decode_workers: dict[str, _Decoding] = {}

        def setup():
            # the pool asks the scheduler what work waits and wakes it after loads; the scheduler
            # is made next, so the two calls reach it through the engine
            self.pool = ModelPool(
                self.catalog, self.device, self.budget_bytes, self._load_pool, variants=self.variants,
                has_work=lambda model_id: self.scheduler.has_work(model_id),
                events=pool_events, retry_cooldown_s=load_retry_cooldown_s, builder=self._build,
                host_cache_bytes=self.host_cache_bytes, on_load_done=lambda: self.scheduler.wake(),
                batches_in_flight=self.parallelism.batches, pinned=pinned, idle_evict_s=idle_evict_s,
            )
            self._idle_timer = asyncio.get_running_loop().create_task(self.pool.watch_idle(), name="sie-idle-evict")
            self.scheduler = Scheduler(
                self.pool, self._infer_pool, max_queued_tokens=max_queued_tokens,
                max_total_queued_tokens=max_total_queued_tokens, max_queue_wait_s=max_queue_wait_s,
                events=scheduler_events,
                parallelism=self.parallelism,
            )
            self._tokenizers = _Tokenizers(self._tokenize_pool, self.pool, self.variants)
            # image decoding, admitted by pixels against the same wait bound (the image threads' own queue)
            self.decoding = DecodeAdmission(max_queue_wait_s, IMAGE_THREADS)
            self.scheduler.start()

        async def setup_there():
            setup()

        if loop is not None:
            setup()  # on the loop already (checked above)
        else:
            asyncio.run_coroutine_threadsafe(setup_there(), self.loop).result()

    # ---- plumbing ----------------------------------------------------------
    def _build(self, card: ModelCard, layout: CheckpointLayout, device: torch.device) -> ModelRunner:
        return build_runner(card, layout, device, tokenizer=self._tokenizers.loaded(card.id))

    async def _on_engine_loop(self, fn: Callable[..., Coroutine], *args, **kwargs):
        """Run `fn` on the engine's loop from whichever loop the caller is on."""
        if _running_loop() is self.loop:
            return await fn(*args, **kwargs)
        future = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self.loop))
        # A caller cancelled (client gone) just as its answer arrived never reads it: mark it read,
        # or asyncio logs "Future exception was never retrieved" with a traceback for a plain 4xx.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return await future

    def _sync(self, fn: Callable[..., Coroutine], *args, **kwargs):
        if _running_loop() is self.loop:
            raise RuntimeError("a sync engine call on the engine's own loop would block it; await the async call")
        return asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self.loop).result()

    def card(self, model_id: str, precision: str | None = None) -> ModelCard:
        """The card for a model id; with `precision`, the card of that precision variant."""
        card = self.catalog.get(model_id)
        if card is None:
            raise ModelNotFound(f"model {model_id!r} is not served here (GET /v1/models lists the served models)")
        if precision is None or precision == card.dtype:
            return card
        return self._precision_variant(card, precision)

    def _precision_variant(self, card: ModelCard, precision: str) -> ModelCard:
        """A call's precision is served by the card's variant in that precision (sie_engine/variants.py):
        a pool entry and queue of its own, so batches never mix precisions; it shares the base
        model's tokenizer and is no catalog entry."""
        if precision not in PRECISIONS:
            raise InvalidRequest(f"precision must be one of {', '.join(PRECISIONS)}", field="precision")
        if precision == "int8" and self.device.type != "cpu":
            raise InvalidRequest("precision int8 runs on the CPU only", field="precision")
        return self.variants.of(card, precision)

    def _require_task(self, card: ModelCard, task: str) -> None:
        if task not in card.tasks:
            raise UnsupportedTask(
                f"model {card.id!r} does not support {task} (its tasks: {', '.join(card.tasks) or 'none'})",
                field="model",
            )

    async def tokenize(self, card: ModelCard, method: str, *args, **kwargs) -> tuple[Any, float]:
        """Tokenise on the tokenizer pool; returns the result and the seconds it took."""
        tokenizer = await self._tokenizers.get(card)
        started = time.monotonic()
        fn = getattr(tokenizer, method)
        # Always on the pool, even a short query (tens of microseconds): tokenising never runs on
        # the loop, so no input can stall it; the hand-offs are batched to keep that cheap.
        result = await self._tokenize_calls.run(lambda: fn(*args, **kwargs))
        return result, time.monotonic() - started

    async def with_tokenizer(self, card: ModelCard, fn: Callable[..., Any], *args) -> tuple[Any, float]:
        """Run `fn(tokenizer, *args)` on the tokenizer pool (a task's own input preparation,
        e.g. GLiNER's prompt and windows; a compat API's tokenize route); returns the result and
        the seconds it took. Callable from any event loop; the model's weights need not be loaded."""
        return await self._on_engine_loop(self._with_tokenizer, card, fn, *args)

    async def _with_tokenizer(self, card: ModelCard, fn: Callable[..., Any], *args) -> tuple[Any, float]:
        tokenizer = await self._tokenizers.get(card)
        started = time.monotonic()
        result = await self._tokenize_calls.run(lambda: fn(tokenizer, *args))
        return result, time.monotonic() - started

    async def decode_worker(self, card: ModelCard) -> DecodeWorker:
        """The decode worker of a generative model (its `generate` head), loading the model if
        needed; one per loaded model, made again when the model was reloaded."""
        return await self._on_engine_loop(self._decode_worker, card)

    async def _decode_worker(self, card: ModelCard) -> DecodeWorker:
        await self._tokenizers.get(card)  # the runner is built with the loaded input preparation
        runner = await self.pool.get(card.id)
        worker = self._decode_workers.get(card.id)
        if worker is not None and worker.runner is runner:
            return worker.worker
        head = runner.heads["generate"]
        if not isinstance(head, GenerationHead):
            raise UnsupportedTask(f"model {card.id!r} does not generate", field="model")
        loop = asyncio.get_running_loop()
        throughput = self.scheduler.admission.throughput
        model_id = card.id

        def observe(tokens: int, seconds: float) -> None:  # on the inference thread: the loop records it
            loop.call_soon_threadsafe(lambda: throughput.observe(model_id, tokens, seconds, full=False))

        def busy(on: bool) -> None:
            if on:
                self.pool.pin(model_id)
            else:
                self.pool.touch(model_id)
                self.pool.unpin(model_id)

        made = DecodeWorker(head, self.scheduler, runner.device, runner.dtype, observe,
                            lambda nbytes: self.pool.charge_cache(model_id, nbytes), busy)
        self._decode_workers[card.id] = _Decoding(runner, made)
        return made

    async def run_items(self, card: ModelCard, task: str, items: list[WorkItem], request: Request) -> list:
        """Queue work items and wait for their results (in item order)."""
        self.scheduler.submit(card.id, task, items, request)
        return await request.future

    def new_request(self, call: Call, task: str, size: int) -> Request:
        """A scheduler request of `size` items for `call`: its deadline, and its admission, which the
        request's items settle as they are queued."""
        return Request(call.card.id, task, size, deadline=call.deadline, reservation=call.reservation)

    @property
    def max_queue_wait_s(self) -> float:
        """The wait bound admission refuses over (--max-queue-wait; infinite in-process by default)."""
        return self.scheduler.admission.max_wait_s

    def submit(self, card: ModelCard, task: str, items: Sequence[WorkItem], request: Request) -> None:
        """Queue work items for a request (a task may submit in several steps)."""
        self.scheduler.submit(card.id, task, items, request)

    async def acquire_adapter(self, card: ModelCard, name: str) -> LoRAAdapter:
        """The card's LoRA adapter `name`, loaded if needed and held until `release_adapter`."""
        return await self.pool.acquire_adapter(card.id, name)

    def release_adapter(self, card: ModelCard, name: str) -> None:
        self.pool.release_adapter(card.id, name)

    def timings(self, request: Request, started: float, tokenize_s: float) -> Timings:
        total = time.monotonic() - started
        queue = (request.started_at - request.enqueued_at) if request.started_at else 0.0
        return Timings(queue=queue, tokenize=tokenize_s, inference=request.inference_s, total=total)

    # ---- tasks (sie_contract's registry: encode, score, extract and plug-ins) ----
    async def run(self, task: str, model: str, /, *args: Any, timeout: float | None = None,
                  pre_admitted: PreAdmitted | None = None, **fields: Any) -> Any:
        """Run a registered task: `await engine.run("score", model, query, items, top_k=3)`.
        `engine.<task>(...)` and `engine.<task>_sync(...)` are the same call.

        timeout: seconds from now by which the call's work must have started (DeadlineExceeded).
        pre_admitted: the handle `refuse_if_overloaded()` returned for this call, if the caller let
        it in before reading its body; admission's decision replaces it (released either way)."""
        spec, implementation = task_implementation(task)  # an unknown task is a 400 naming the known ones
        try:
            request = spec.request(args, fields)
        except FieldError as exc:
            raise InvalidRequest(str(exc), field=exc.field) from None
        card = self.card(model)
        self._require_task(card, task)
        request = with_profile(card, request, task)  # the profile under the request's fields; its adapter checked
        deadline = time.monotonic() + timeout if timeout is not None else None
        return await self._on_engine_loop(self._admitted, implementation, task, card, request, deadline,
                                          pre_admitted)

    async def _admitted(self, implementation: TaskRun, task: str, card: ModelCard, request: dict[str, Any],
                        deadline: float | None, pre_admitted: PreAdmitted | None) -> Any:
        """The call resolved and run once admission lets it in (on the engine's loop: precision
        variants are made there, one at a time). The decision comes before any tokenising: a
        refusal is immediate (admission.py)."""
        precision = request.get("precision")
        if precision is not None and precision != card.dtype:
            card = self._precision_variant(card, precision)
        prompt = max(len(card.query_template), len(card.document_template)) + len(card.query_instruction or "")
        try:
            reservation = self.scheduler.admit(
                card.id, upper_bound_tokens(request, card.max_seq_len, prompt, self._image_tokens(card),
                                            self.limits.max_document_pages, generated_tokens(card, request)),
                cold_batch=self._cold_batch(card))
        finally:
            if pre_admitted is not None:  # decided: its reservation (or refusal) stands for it now
                pre_admitted.release()
        call = Call(task, card, request, deadline=deadline, reservation=reservation, precision=precision)
        try:
            reservation.decoding = await self._admit_decoding(card, request)
            return await implementation(self, call)
        finally:
            reservation.release()

    async def _admit_decoding(self, card: ModelCard, request: dict[str, Any]) -> DecodeTicket | None:
        """The request's image and video items (and a reranker's image or video query, decoded once for
        all its pairs) admitted by their pixels (decode_admission.py), read from their headers and
        containers off this loop (about 0.1 ms an image); None when it sends neither."""
        items = request.get("items")
        if not card.image_size or not isinstance(items, (list, tuple)) or not self.scheduler.admission.bounded:
            return None  # no wait bound (an in-process engine by default): nothing to refuse by
        query = request.get("query")
        media = [*items, query] if isinstance(query, dict) else items
        images = [item["image"] for item in media if isinstance(item, dict) and item.get("image") is not None]
        videos = [item["video"] for item in media if isinstance(item, dict) and item.get("video") is not None]
        if not images and not videos:
            return None
        limits = self.limits
        pixels = await asyncio.get_running_loop().run_in_executor(
            None, lambda: sum(header_pixels(image, limits) for image in images)
            + sum(video_admission_pixels(video, limits) for video in videos))
        return self.decoding.admit(pixels)

    def scores_pairs(self, model: str) -> bool:
        """Whether `score_pairs` serves `model` (a plain cross-encoder; tasks/score_pairs.py)."""
        card = self.card(model)
        return "score" in card.tasks and scores_pairs(card)

    async def score_pairs(self, model: str, queries: Sequence[str], texts: Sequence[str], *,
                          truncate: bool | None = None, timeout: float | None = None,
                          pre_admitted: PreAdmitted | None = None) -> ScoreResult:
        """Score `queries[i]` against `texts[i]` for every i as one request (one admission, one
        tokenisation, one submission), whatever the number of distinct queries; scores best
        first with each pair's index. Only for a model `scores_pairs` says yes to; invalid
        texts are 400s naming `items[i].query` or `items[i].text`."""
        card = self.card(model)
        self._require_task(card, "score")
        if not scores_pairs(card):
            raise UnsupportedTask(f"model {card.id!r} scores one query at a time (score)", field="model")
        if len(queries) != len(texts):
            raise InvalidRequest("queries and texts must pair up one to one", field="items")
        v.check_optional_bool(truncate, "truncate")
        # admission's bound: each pair's two texts share its sequence
        fields = {"items": [q + t for q, t in zip(queries, texts)], "truncate": truncate}
        deadline = time.monotonic() + timeout if timeout is not None else None

        async def pairs(engine: Any, call: Call) -> ScoreResult:
            return await run_pairs(engine, call, queries, texts)

        return await self._on_engine_loop(self._admitted, pairs, "score", card, fields, deadline, pre_admitted)

    async def run_within(self, parent: Call, task: str, model: str, fields: Mapping[str, Any]) -> Any:
        """Run `task` on another model as part of `parent` (GLiREL's entity_model): the model is
        resolved and its task checked as for any call; the parent's deadline and admission cover the
        work (the parent's bound counted its texts), so it is not admitted again. On the engine's loop."""
        spec, implementation = task_implementation(task)
        try:
            request = spec.request((), fields)
        except FieldError as exc:
            raise InvalidRequest(str(exc), field=exc.field) from None
        # the parent's own model may be a precision variant, which no request can name: it is the call's card
        card = parent.card if model == parent.card.id else self.card(model)
        self._require_task(card, task)
        call = Call(task, card, request, deadline=parent.deadline, reservation=parent.reservation)
        return await implementation(self, call)

    def _cold_batch(self, card: ModelCard) -> int | None:
        """The batch a model never measured is admitted by (admission.cold_allowance), for a model
        being preloaded: a flood that arrives while the server starts is its case (issue #30.2).
        None (the throughput prior decides) for a model loaded on demand: a burst to a model not
        loaded yet is a router's failover or a first burst, and one batch there turned them into
        429s the router then spread over every worker, or 503s once its hold ran out."""
        return self._batch_tokens(card) if card.id in self._preloaded else None

    def _batch_tokens(self, card: ModelCard) -> int:
        """A batch of this model (what admission lets in while its throughput is unmeasured):
        its runner's budget once loaded, else its card's, capped on CPU as most families' are
        (before the weights are read the family is not known; smaller errs on the safe side)."""
        runner = self.pool.resident(card.id)
        if runner is not None and runner.batch_tokens:
            return runner.batch_tokens
        if self.device.type == "cpu":
            return max(min(card.max_batch_tokens, CPU_FLOAT32_BATCH_TOKENS), card.max_seq_len)
        return card.max_batch_tokens

    def _image_tokens(self, card: ModelCard) -> int | None:
        """Positions an image item of this model runs (admission's count): its preprocessor's,
        once loaded, else a bound from the card's image size; None for a text-only model."""
        inputs = self._tokenizers.loaded(card.id)
        if inputs is not None and inputs.images is not None:
            return inputs.images.image_tokens
        return image_positions_bound(card.image_size) if card.image_size else None

    def run_sync(self, task: str, model: str, /, *args: Any, **fields: Any) -> Any:
        return self._sync(self.run, task, model, *args, **fields)

    def __getattr__(self, name: str) -> Callable:
        """`engine.encode(...)`, `engine.encode_sync(...)` and so on for every registered task."""
        task, sync = (name[:-5], True) if name.endswith("_sync") else (name, False)
        spec = task_registry.get(task) if not name.startswith("_") else None
        if spec is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return _task_method(self, spec, sync)

    def __dir__(self) -> list[str]:
        names = task_registry.names()
        return sorted({*super().__dir__(), *names, *(f"{n}_sync" for n in names)})

    # ---- models ------------------------------------------------------------
    async def load(self, model: str) -> None:
        """Load a model now (preloading); raises ModelLoadFailed with the reason."""

        async def _load():
            card = self.card(model)
            self._preloaded.add(card.id)
            await self._tokenizers.get(card)
            await self.pool.get(model)

        await self._on_engine_loop(_load)

    async def warm_up(self, model: str) -> float:
        """Run one batch of synthetic text through a loaded model (warmup.py), outside admission,
        so its throughput is measured; returns the seconds it took. Raises SIEError where the
        model's task takes no text."""

        async def _warm() -> float:
            card = self.card(model)
            task = card.tasks[0]
            spec, implementation = task_implementation(task)
            try:
                request = spec.request((), warm_up_fields(card, task, self._batch_tokens(card)))
            except FieldError as exc:
                raise InvalidRequest(str(exc), field=exc.field) from None
            started = time.monotonic()
            # not admitted: it is the server's own work, run before any client's
            await implementation(self, Call(task, card, request))
            return time.monotonic() - started

        return await self._on_engine_loop(_warm)

    def load_sync(self, model: str) -> None:
        self._sync(self.load, model)

    def model_info(self, model: str) -> ModelInfo:
        """A served model's state; also a precision variant's the engine made, by its name
        (`<id>@<precision>`: its own resident weights), which no request can name as its model."""
        variant = self.variants.get(model)
        card = variant if variant is not None else self.card(model)
        runner = self.pool.resident(model)
        dims = dict(runner.dims) if runner else ({"dense": card.dims} if card.dims and "dense" in card.outputs else {})
        failure = self.pool.failure(model)
        where = self._weights_location(card)
        pinned = self.pool.is_pinned(model)
        return ModelInfo(
            id=card.id, family=runner.family.name if runner else card.family, tasks=card.tasks, outputs=card.outputs,
            dims=dims, matryoshka_dims=card.matryoshka_dims, max_seq_len=card.max_seq_len,
            state=self.pool.state(model), memory_bytes=self.pool.memory_bytes(model),
            error=failure.message if failure else None, description=card.description,
            weights="local" if runner else where.status, weights_source=where.source, weights_detail=where.detail,
            modalities=card.modalities, image_size=card.image_size,
            pinned=pinned, idle_evict_s=None if pinned else self.pool.idle_limit(model),  # a pin outranks a limit
            adapters=tuple(card.adapters), profiles=tuple(card.profiles),
        )

    async def set_cards(self, cards: Sequence[ModelCard]) -> list[str]:
        """Add or replace cards at run time (the admin API). A replaced card's model is unloaded
        once nothing uses it, and loads again from the new card on its next request; a card equal
        to the one served changes nothing. Returns the ids whose card changed."""

        async def apply() -> list[str]:
            changed = []
            for card in cards:
                old = self.catalog.get(card.id)
                if old == card:
                    continue
                self.catalog.add(card)
                if old is not None:
                    self._forget(card.id)
                changed.append(card.id)
            if changed:  # pins may have changed: loads refused for pinned memory may fit now
                self.pool.forget_failures("out_of_memory")
            self.pool.wake_idle()
            return changed

        return await self._on_engine_loop(apply)

    async def remove_card(self, model: str) -> bool:
        """Stop serving a model (the admin API): new requests get 404 at once, work already queued
        for it is still answered, and its weights are unloaded once nothing uses them. False when
        no such card was served."""

        async def remove() -> bool:
            card = self.catalog.remove(model)
            if card is None:
                return False
            self._forget(model, removed=card)
            self.pool.forget_failures("out_of_memory")
            return True

        return await self._on_engine_loop(remove)

    def _forget(self, model: str, removed: ModelCard | None = None) -> None:
        """Nothing of a replaced or removed card is reused: its weights, load plan, tokenizer and
        weights location (the new card may name other files)."""
        self.pool.retire(model, removed=removed)
        self._tokenizers.forget(model)
        self._locations.pop(model, None)

    def _weights_location(self, card: ModelCard) -> WeightsLocation:
        """Where a card's weights are, looked up at most every WEIGHTS_RECHECK_S per card
        (a hub cache check reads the file system; listing every model must stay cheap)."""
        cached = self._locations.get(card.id)
        now = time.monotonic()
        if cached is None or now - cached[0] > WEIGHTS_RECHECK_S:
            cached = self._locations[card.id] = (now, locate_weights(card))
        return cached[1]

    def models(self) -> list[ModelInfo]:
        return [self.model_info(card.id) for card in self.catalog]

    def queued(self, model: str | None = None) -> tuple[int, int]:
        """(items, tokens) waiting for a batch."""
        return self.scheduler.queued(model)

    async def status(self) -> EngineStatus:
        """Every served model's state and queue, read together on the engine's loop (the router
        routes on these numbers, so they come from the scheduler itself, not a metrics mirror)."""

        async def snapshot() -> EngineStatus:
            models = {}
            for card in self.catalog:
                items, tokens = self.scheduler.queued(card.id)
                models[card.id] = ModelStatus(self.pool.state(card.id), items, tokens)
            return EngineStatus(models)

        return await self._on_engine_loop(snapshot)

    # ---- lifecycle ---------------------------------------------------------
    async def drain(self) -> None:
        """Refuse new work and return once every accepted request has been answered."""
        await self._on_engine_loop(self.scheduler.drain)

    def refuse_if_overloaded(self, model: str | None = None, body_bytes: int | None = None) -> PreAdmitted:
        """Raise Overloaded (429) if the queue already holds more work than `max_queue_wait_s`
        (with the calls let in here that admission has not decided yet, each charged what it
        can cost: at most `body_bytes` tokens of `model` when the headers say them), or if
        `model` is not measured yet and holds a batch already; else return the handle of the
        call let in. Cheap and safe from any thread: a server calls it before reading a
        request's body, hands the handle to `run(..., pre_admitted=handle)` and gives it to
        `pre_admission_done(handle)` when the request ends. Every call is checked again, in
        full, when it runs."""
        card = self.catalog.get(model) if model is not None else None
        if card is None:
            return self.scheduler.pre_admit(body_bytes=body_bytes)
        return self.scheduler.pre_admit(card.id, body_bytes, self._cold_batch(card))

    @staticmethod
    def pre_admission_done(handle: PreAdmitted | None) -> None:
        """The request let in by `refuse_if_overloaded` has ended (it may never have reached
        admission: a bad body, a client gone); idempotent, and None is nothing to do."""
        if handle is not None:
            handle.release()

    async def abort(self, message: str, retry_after: float = 5.0) -> int:
        """Refuse new work and answer every accepted request still unanswered with Draining
        (503 `draining` with Retry-After over HTTP); returns how many were answered so."""

        async def abort() -> int:
            return self.scheduler.abort(message, retry_after)

        return await self._on_engine_loop(abort)

    def close(self) -> None:
        """End the engine from outside its loop (an engine on a shared loop: `await aclose()`)."""
        if self._closed:
            return
        if self._loop_thread is None:
            raise RuntimeError("this engine runs on its caller's loop: end it with `await engine.aclose()` there")
        self._closed = True
        self.loop.call_soon_threadsafe(self._idle_timer.cancel)
        asyncio.run_coroutine_threadsafe(self.scheduler.close(), self.loop).result(timeout=30)
        self._loop_thread.stop()
        self._shutdown_threads()

    async def aclose(self) -> None:
        """End the engine from any loop (the one it shares, or another)."""
        if self._closed:
            return
        self._closed = True
        self.loop.call_soon_threadsafe(self._idle_timer.cancel)
        await self._on_engine_loop(self.scheduler.close)
        if self._loop_thread is not None:
            self._loop_thread.stop()
        self._shutdown_threads()

    def _shutdown_threads(self) -> None:
        self._tokenize_calls.close()
        for executor in (self._tokenize_pool, self._infer_pool, self._load_pool):
            executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _task_method(engine: Engine, spec: Task, sync: bool) -> Callable:
    """A registered task as a method of `engine`, with the task's signature and fields as its doc."""

    def call_sync(model, *args, **fields):
        return engine.run_sync(spec.name, model, *args, **fields)

    async def call_async(model, *args, **fields):
        return await engine.run(spec.name, model, *args, **fields)

    call: Callable = call_sync if sync else call_async
    call.__name__ = f"{spec.name}_sync" if sync else spec.name
    call.__doc__ = spec.doc()
    call.__signature__ = spec.signature(  # type: ignore[attr-defined]
        inspect.Parameter("timeout", inspect.Parameter.KEYWORD_ONLY, default=None))
    return call


__all__ = ["Engine", "PreAdmitted", "parse_bytes", "Quantized", "SparseVector"]
