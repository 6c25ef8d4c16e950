"""`Engine`: SIE as a library. Async `encode` / `score` / `extract` with sync
wrappers, on top of the catalog, the model pool and the scheduler.

The engine runs its scheduler on an event loop of its own, in a background
thread, so it serves callers from any event loop (the server's, a notebook's)
or from plain threads. Tokenisation runs on a thread pool and inference on
inference threads (one on CUDA; on CPU `cpu_batches`, default two, each batch on a
share of torch's threads); neither blocks any event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import threading
import time
from typing import Any, Awaitable, Callable, Sequence

import numpy as np
import torch

from .arch import family_for
from .card import Catalog, ModelCard
from .errors import InvalidRequest, ModelNotFound, UnsupportedTask
from .parallelism import BatchParallelism
from .pool import ModelPool, PoolEvents
from .postprocess import Quantized, convert_dtype, truncate_and_normalize
from .runner import WorkItem, build_runner
from .heads.colbert import marked_encode_args, uses_markers
from .scheduler import Request, Scheduler, SchedulerEvents
from .tokenizer import TextTokenizer, Tokenized
from .types import EncodedItem, EncodeResult, ModelInfo, SparseVector, Timings
from . import validation as v
from .weights import read_config, resolve_weights

log = logging.getLogger(__name__)

PRECISIONS = ("float32", "float16", "bfloat16", "int8")
# Texts tokenised per step of a large encode request (see Engine._encode).
TOKENIZE_CHUNK = 2048

UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 2**10, "M": 1e6, "MB": 1e6, "MIB": 2**20,
         "G": 1e9, "GB": 1e9, "GIB": 2**30, "T": 1e12, "TB": 1e12, "TIB": 2**40}


def parse_bytes(value: int | str) -> int:
    """`8GiB`, `512MB`, `1e9` or an int -> bytes."""
    if isinstance(value, int):
        return value
    text = str(value).strip().upper().replace(" ", "")
    number = text.rstrip("KMGTIB")
    unit = text[len(number):]
    if unit not in UNITS or not number:
        raise ValueError(f"cannot read {value!r} as a size (examples: 8GiB, 512MB)")
    return int(float(number) * UNITS[unit])


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
    A tokenizer that cannot load is a load failure of its model, recorded by the pool."""

    def __init__(self, executor, pool: ModelPool):
        self._executor = executor
        self._pool = pool
        self._loaded: dict[str, TextTokenizer] = {}
        self._loading: dict[str, asyncio.Future] = {}

    def loaded(self, model_id: str) -> TextTokenizer | None:
        return self._loaded.get(model_id)

    async def get(self, card: ModelCard) -> TextTokenizer:
        tokenizer = self._loaded.get(card.id)
        if tokenizer is not None:
            return tokenizer
        failure = self._pool.failure(card.id)
        if failure is not None:
            raise failure
        future = self._loading.get(card.id)
        if future is None:
            future = asyncio.get_running_loop().run_in_executor(self._executor, self._load, card)
            self._loading[card.id] = future
        try:
            tokenizer = await asyncio.shield(future)
        except Exception as exc:
            raise self._pool.failure(card.id) or self._pool.record_failure(card.id, exc) from exc
        finally:
            self._loading.pop(card.id, None)
        self._loaded[card.id] = tokenizer
        return tokenizer

    @staticmethod
    def _load(card: ModelCard) -> TextTokenizer:
        root = resolve_weights(card)
        config = read_config(root)
        family_for(config, card.family)  # an unsupported architecture is the error to report, not the tokenizer's
        max_len = card.max_seq_len
        positions = config.get("max_position_embeddings")
        if positions and config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
            positions -= int(config.get("pad_token_id", 1)) + 1
        if positions:
            max_len = min(max_len, positions)
        return TextTokenizer(root, max_len, trust_remote_code=card.trust_remote_code)


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
        limits: v.Limits = v.Limits(),
        tokenizer_threads: int = 2,
        cpu_batches: int | None = None,
        pool_events: PoolEvents | None = None,
        scheduler_events: SchedulerEvents | None = None,
        load_retry_cooldown_s: float = 30.0,
    ):
        self.catalog = catalog if catalog is not None else Catalog.builtin()
        self.device = resolve_device(device)
        self.budget_bytes = parse_bytes(memory_budget) if memory_budget is not None else default_budget(self.device)
        # evicted models kept warm in host memory (see host_cache.py); CPU default 0: there
        # the budget already is RAM, and the operator opts in to spending more of it
        self.host_cache_bytes = parse_bytes(host_cache) if host_cache is not None else default_host_cache(self.device)
        self.limits = limits
        self._tokenize_pool = concurrent.futures.ThreadPoolExecutor(tokenizer_threads, thread_name_prefix="sie-tokenize")
        # on CPU, batches side by side on a share of torch's threads each (parallelism.py)
        self.parallelism = BatchParallelism.for_device(self.device, cpu_batches)
        self._infer_pool = concurrent.futures.ThreadPoolExecutor(self.parallelism.batches, thread_name_prefix="sie-infer")
        self._load_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sie-load")
        self._loop_thread = _LoopThread("sie-engine")
        self.loop = self._loop_thread.loop
        self._closed = False

        async def setup():
            self.pool = ModelPool(
                self.catalog, self.device, self.budget_bytes, self._load_pool,
                events=pool_events, retry_cooldown_s=load_retry_cooldown_s, builder=self._build,
                host_cache_bytes=self.host_cache_bytes,
            )
            self.scheduler = Scheduler(
                self.pool, self._infer_pool, max_queued_tokens=max_queued_tokens,
                max_total_queued_tokens=max_total_queued_tokens, events=scheduler_events,
                parallelism=self.parallelism,
            )
            self.pool._has_work = self.scheduler.has_work
            self._tokenizers = _Tokenizers(self._tokenize_pool, self.pool)
            self.scheduler.start()

        asyncio.run_coroutine_threadsafe(setup(), self.loop).result()

    # ---- plumbing ----------------------------------------------------------
    def _build(self, card: ModelCard, root, device):
        tokenizer = self._tokenizers.loaded(card.id)
        return build_runner(card, root, device, tokenizer=tokenizer)

    async def _on_engine_loop(self, fn: Callable[..., Awaitable], *args, **kwargs):
        """Run `fn` on the engine's loop from whichever loop the caller is on."""
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is self.loop:
            return await fn(*args, **kwargs)
        future = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self.loop))
        # A caller cancelled (client gone) just as its answer arrived never reads it: mark it read,
        # or asyncio logs "Future exception was never retrieved" with a traceback for a plain 4xx.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return await future

    def _sync(self, fn: Callable[..., Awaitable], *args, **kwargs):
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
        """A request's precision is served by a variant card `<id>@<precision>`: its own pool
        entry and queue, so batches never mix precisions."""
        if precision not in PRECISIONS:
            raise InvalidRequest(f"precision must be one of {', '.join(PRECISIONS)}", field="precision")
        if precision == "int8" and self.device.type != "cpu":
            raise InvalidRequest("precision int8 runs on the CPU only", field="precision")
        variant_id = f"{card.id}@{precision}"
        variant = self.catalog.get(variant_id)
        if variant is None:
            variant = dataclasses.replace(card, id=variant_id, dtype=precision,
                                          description=f"{card.id} computed in {precision}")
            self.catalog.add(variant)
        return variant

    def _require_task(self, card: ModelCard, task: str) -> None:
        if task not in card.tasks:
            raise UnsupportedTask(
                f"model {card.id!r} does not support {task} (its tasks: {', '.join(card.tasks) or 'none'})", field="model"
            )

    async def tokenize(self, card: ModelCard, method: str, *args, **kwargs) -> tuple[Tokenized, float]:
        """Tokenise on the tokenizer pool; returns the result and the seconds it took."""
        tokenizer = await self._tokenizers.get(card)
        started = time.monotonic()
        fn = getattr(tokenizer, method)
        result = await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, lambda: fn(*args, **kwargs))
        return result, time.monotonic() - started

    async def with_tokenizer(self, card: ModelCard, fn: Callable[..., Any], *args) -> tuple[Any, float]:
        """Run `fn(tokenizer, *args)` on the tokenizer pool (a task's own input preparation,
        e.g. GLiNER's prompt and windows); returns the result and the seconds it took."""
        tokenizer = await self._tokenizers.get(card)
        started = time.monotonic()
        result = await asyncio.get_running_loop().run_in_executor(self._tokenize_pool, lambda: fn(tokenizer, *args))
        return result, time.monotonic() - started

    async def run_items(self, card: ModelCard, task: str, items: list[WorkItem], request: Request) -> list:
        """Queue work items and wait for their results (in item order)."""
        self.scheduler.submit(card.id, task, items, request)
        return await request.future

    def new_request(self, card: ModelCard, task: str, size: int, timeout: float | None) -> Request:
        deadline = time.monotonic() + timeout if timeout is not None else None
        return Request(card.id, task, size, deadline=deadline)

    # ---- encode ------------------------------------------------------------
    async def encode(self, model: str, items: Sequence[Any], *, output_types: Sequence[str] | None = None,
                     is_query: bool = False, instruction: str | None = None, dims: int | None = None,
                     normalize: bool | None = None, output_dtype: str = "float32", truncate: bool = True,
                     timeout: float | None = None, precision: str | None = None) -> EncodeResult:
        """Encode texts (strings or `{id?, text}` dicts) into dense / sparse / multivector outputs.
        `precision` (float32, bfloat16, float16, int8) overrides the card's compute dtype."""
        return await self._on_engine_loop(
            self._encode, model, items, output_types, is_query, instruction, dims, normalize, output_dtype,
            truncate, timeout, precision,
        )

    def encode_sync(self, model: str, items: Sequence[Any], **options) -> EncodeResult:
        return self._sync(self.encode, model, items, **options)

    async def _encode(self, model, items, output_types, is_query, instruction, dims, normalize, output_dtype,
                      truncate, timeout, precision) -> EncodeResult:
        started = time.monotonic()
        card = self.card(model, precision)
        self._require_task(card, "encode")
        ids, texts = v.parse_items(items, self.limits)
        outputs = v.check_output_types(output_types, card)
        is_query = bool(v.check_optional_bool(is_query, "is_query"))
        normalize = v.check_optional_bool(normalize, "normalize")
        truncate = v.check_optional_bool(truncate, "truncate")
        instruction = v.check_instruction(instruction, self.limits)
        output_dtype = v.check_output_dtype(output_dtype)
        dims = v.check_dims(dims, card.dims, card)
        template, instr = card.template_for(is_query, instruction)
        prefix, _, suffix = template.partition("{text}")
        prefix = prefix.replace("{instruction}", instr or "")
        suffix = suffix.replace("{instruction}", instr or "")
        if prefix or suffix:
            texts = [prefix + t + suffix for t in texts]
        if "multivector" in card.outputs and uses_markers(card):  # ColBERT: markers, query expansion
            method, kwargs = "encode_marked", marked_encode_args(card, is_query)
        else:
            method, kwargs = "encode", {}
        request = self.new_request(card, "encode", len(texts), timeout)
        outputs_set = frozenset(outputs)
        tokens = 0
        tokenize_s = 0.0
        # Large requests are tokenised chunk by chunk, each chunk queued as soon as it is ready,
        # so inference starts while the rest is still being tokenised.
        starts = range(0, len(texts), TOKENIZE_CHUNK)
        pending = asyncio.ensure_future(self.tokenize(card, method, texts[:TOKENIZE_CHUNK], **kwargs))
        try:
            for start in starts:
                tokenized, seconds = await pending
                if start + TOKENIZE_CHUNK < len(texts):
                    following = texts[start + TOKENIZE_CHUNK:start + 2 * TOKENIZE_CHUNK]
                    pending = asyncio.ensure_future(self.tokenize(card, method, following, **kwargs))
                tokenize_s += seconds
                tokens += tokenized.num_tokens
                check_truncation(tokenized, truncate, offset=start)
                # longest first inside the chunk: batches of similar lengths need little padding
                order = sorted(range(len(tokenized.ids)), key=lambda i: -len(tokenized.ids[i]))
                key_lens = tokenized.key_lens or [None] * len(tokenized.ids)
                work = [WorkItem(request, start + i, tokenized.ids[i], outputs=outputs_set, key_len=key_lens[i])
                        for i in order]
                self.scheduler.submit(card.id, "encode", work, request)
        except BaseException as exc:
            request.fail(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            request.future.exception()  # raised below, not awaited: marked read so asyncio logs no traceback
            if not pending.done():
                pending.cancel()
            raise
        raw = await request.future
        result_items = assemble_encoded(ids, raw, outputs, dims, card.normalize if normalize is None else normalize, output_dtype)
        return EncodeResult(card.id, result_items, tokens, self._timings(request, started, tokenize_s))

    def _timings(self, request: Request, started: float, tokenize_s: float) -> Timings:
        total = time.monotonic() - started
        queue = (request.started_at - request.enqueued_at) if request.started_at else 0.0
        return Timings(queue=queue, tokenize=tokenize_s, inference=request.inference_s, total=total)

    # ---- score / extract (their heads register the implementations) --------
    async def score(self, model: str, query: Any, items: Sequence[Any], *, top_k: int | None = None,
                    timeout: float | None = None, **options):
        """Score items against a query (cross-encoder or late interaction); best first."""
        self._require_task(self.card(model), "score")
        from .tasks import score as score_task

        return await self._on_engine_loop(score_task.run, self, model, query, items, top_k, timeout, options)

    def score_sync(self, model: str, query: Any, items: Sequence[Any], **options):
        return self._sync(self.score, model, query, items, **options)

    async def extract(self, model: str, items: Sequence[Any], labels: Sequence[str], *, threshold: float = 0.5,
                      flat: bool = True, timeout: float | None = None, **options):
        """Zero-shot entity extraction with the given labels."""
        self._require_task(self.card(model), "extract")
        from .tasks import extract as extract_task

        return await self._on_engine_loop(extract_task.run, self, model, items, labels, threshold, flat, timeout, options)

    def extract_sync(self, model: str, items: Sequence[Any], labels: Sequence[str], **options):
        return self._sync(self.extract, model, items, labels, **options)

    # ---- models ------------------------------------------------------------
    async def load(self, model: str) -> None:
        """Load a model now (preloading); raises ModelLoadFailed with the reason."""

        async def _load():
            card = self.card(model)
            await self._tokenizers.get(card)
            await self.pool.get(model)

        await self._on_engine_loop(_load)

    def load_sync(self, model: str) -> None:
        self._sync(self.load, model)

    def model_info(self, model: str) -> ModelInfo:
        card = self.card(model)
        runner = self.pool.resident(model)
        dims = dict(runner.dims) if runner else ({"dense": card.dims} if card.dims and "dense" in card.outputs else {})
        failure = self.pool.failure(model)
        return ModelInfo(
            id=card.id, family=runner.family.name if runner else card.family, tasks=card.tasks, outputs=card.outputs,
            dims=dims, matryoshka_dims=card.matryoshka_dims, max_seq_len=card.max_seq_len,
            state=self.pool.state(model), memory_bytes=self.pool.memory_bytes(model),
            error=failure.message if failure else None, description=card.description,
        )

    def models(self) -> list[ModelInfo]:
        return [self.model_info(card.id) for card in self.catalog]

    def queued(self, model: str | None = None) -> tuple[int, int]:
        """(items, tokens) waiting for a batch."""
        return self.scheduler.queued(model)

    # ---- lifecycle ---------------------------------------------------------
    async def drain(self) -> None:
        """Refuse new work and return once every accepted request has been answered."""
        await self._on_engine_loop(self.scheduler.drain)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        asyncio.run_coroutine_threadsafe(self.scheduler.close(), self.loop).result(timeout=30)
        self._loop_thread.stop()
        for executor in (self._tokenize_pool, self._infer_pool, self._load_pool):
            executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_truncation(tokenized: Tokenized, truncate: bool | None, field: str = "items", offset: int = 0) -> None:
    """With truncate=false, a text longer than the model's window is a 400 naming it."""
    if truncate is False:
        for i, was_truncated in enumerate(tokenized.truncated, start=offset):
            if was_truncated:
                raise InvalidRequest(
                    f"{field}[{i}] is longer than the model's window; shorten it or allow truncation", field=f"{field}[{i}].text"
                )


def assemble_encoded(ids: list[str], raw: list[dict], outputs: Sequence[str], dims: int | None,
                     normalize: bool, output_dtype: str) -> list[EncodedItem]:
    """Per-item head outputs -> EncodedItems with the request's output options."""
    items = [EncodedItem(id=item_id) for item_id in ids]
    if "dense" in outputs:
        dense = np.stack([r["dense"] for r in raw])
        if dims is not None and dims > dense.shape[1]:  # a card without `dims` is checked here, on the real width
            raise InvalidRequest(f"dims must be between 1 and {dense.shape[1]} for this model", field="dims")
        dense = truncate_and_normalize(dense, dims, normalize)
        for item, vector in zip(items, dense):
            item.dense = convert_dtype(vector, output_dtype)
    if "sparse" in outputs:
        for item, r in zip(items, raw):
            item.sparse = r["sparse"]
    if "multivector" in outputs:
        for item, r in zip(items, raw):
            item.multivector = convert_dtype(r["multivector"], output_dtype)
    return items


__all__ = ["Engine", "parse_bytes", "Quantized", "SparseVector"]
