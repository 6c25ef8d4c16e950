"""`SIEClient` (sync) and `AsyncSIEClient`: encode, score, extract and models over
SIE's HTTP API, or in-process with the embedded engine.

Both share the request building, chunking, retry decisions and parsing; they
differ only in how a request is sent and how chunks run concurrently (a thread
pool for the sync client, tasks under a semaphore for the async one).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, cast
from urllib.parse import quote

from tqdm.auto import tqdm

from sie_contract.registry import get as get_task
from sie_contract.registry import names as task_names
from sie_contract.tasks import Task

from . import batching, wire
from .embedded import AsyncEmbeddedTransport, EmbeddedTransport
from .environment import api_key_from_env, url_from_env
from .http import AsyncHTTPTransport, HTTPTransport
from .retry import RetryPolicy
from .timeouts import TimeoutLike, Timeouts, resolve_timeouts
from .types import EncodeResult, ExtractResult, ModelInfo, ScoreResult

# What the typed calls return: the result on SIEClient, an awaitable of it on AsyncSIEClient. The
# calls are declared once, in _Base, and each client says its three return types.
EncodeT = TypeVar("EncodeT")
ScoreT = TypeVar("ScoreT")
ExtractT = TypeVar("ExtractT")

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDED = "embedded"


def resolve_url(url: str | None) -> str:
    """The URL to use: the argument, else `SIE_URL`, else embedded mode."""
    url = url if url is not None else url_from_env() or EMBEDDED
    if url != EMBEDDED and not url.startswith(("http://", "https://")):
        raise ValueError(f"SIE url must be 'embedded' or start with http:// or https://, got {url!r}")
    return url


def _model_path(route: str, model: str) -> str:
    if not isinstance(model, str) or not model:
        raise ValueError("model must be a non-empty model id such as 'sentence-transformers/all-MiniLM-L6-v2'")
    return f"/v1/{route}/{quote(model, safe='/')}"


class _Base(Generic[EncodeT, ScoreT, ExtractT]):
    """Options and request building shared by both clients."""

    def __init__(self, url: str | None = None, *, api_key: str | None = None, timeout: TimeoutLike = Timeouts(),
                 encoding: str = "msgpack", batch_size: int = 128, max_concurrency: int = 4,
                 retry: RetryPolicy | None = None, max_retries: int | None = None, backoff_s: float | None = None,
                 retry_read_timeouts: bool | None = None, progress: bool = False, device: str = "auto",
                 local_models: Mapping[str, str] | None = None, model_dirs: Sequence[str] = (), engine: Any = None):
        """
        url: `http(s)://host:port` of a server or router, or "embedded" (the default when
            neither this nor `SIE_URL` is set) to run the engine in this process.
        api_key: sent as `Authorization: Bearer`; defaults to `SIE_API_KEY`.
        timeout: a `Timeouts` (connect 5 s, read 120 s, write and pool 60 s, total 300 s per
            request with its retries: the default), seconds (read, write and pool; connect at most
            5 s), an `httpx.Timeout`, or None (no limit); see `sie_client.timeouts`.
        encoding: "msgpack" (compact binary vectors, the default) or "json".
        batch_size: items per request; larger inputs are split and sent `max_concurrency` at a time.
        retry: how 429/503 answers and requests that never reached the server are retried.
        max_retries, backoff_s, retry_read_timeouts: change those fields of `retry` (retries after
            the first try; first back-off in seconds; whether a POST whose answer timed out is sent again).
        progress: show a tqdm progress bar over items by default.
        device, local_models, model_dirs, engine: embedded mode only (see `embedded.shared_engine`);
            `engine` passes an `sie_engine.Engine` of your own.
        """
        if encoding not in ("msgpack", "json"):
            raise ValueError("encoding must be 'msgpack' or 'json'")
        if batch_size <= 0 or max_concurrency <= 0:
            raise ValueError("batch_size and max_concurrency must be positive")
        self.url = resolve_url(EMBEDDED if engine is not None and url is None else url)
        self.api_key = api_key if api_key is not None else api_key_from_env()
        self.timeout = resolve_timeouts(timeout)
        self.encoding = encoding
        self.batch_size = batch_size
        self.max_concurrency = max_concurrency
        self.retry = (retry or RetryPolicy()).with_options(max_retries, backoff_s, retry_read_timeouts)
        self.progress = progress
        self._embedded_options = dict(engine=engine, device=device, local_models=local_models,
                                      model_dirs=tuple(model_dirs), timeout=self.timeout.read)

    @property
    def embedded(self) -> bool:
        return self.url == EMBEDDED

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r})"

    def _bodies(self, task: Task, args: tuple, fields: dict,
                batch_size: int | None) -> tuple[int, list[tuple[int, dict]]]:
        """A task call's request bodies: its `chunk_field` list split into `batch_size` chunks
        (each item with its index as id, so the answers merge as one), or one body (also for a
        late-chunking encode)."""
        body = task.bind(args, fields)  # the names checked here; the values by the server (or embedded engine)
        body = wire.normalize_request(task.name, body)
        if task.chunk_field is None or not isinstance(body.get(task.chunk_field), list):
            return 1, [(0, body)]
        if body.get("late_chunking"):  # a request's items are one document's chunks: never split
            return len(body[task.chunk_field]), [(0, body)]
        items = body.pop(task.chunk_field)
        if task.chunk_field == "items":
            items = batching.with_ids(items)
        chunks = batching.split(items, batch_size or self.batch_size)
        return len(items), [(offset, {**body, task.chunk_field: chunk}) for offset, chunk in chunks]

    @staticmethod
    def _task(name: str) -> Task:
        task = get_task(name)
        if task is None:
            raise ValueError(f"no task {name!r} (tasks: {', '.join(task_names())})")
        return task

    def __getattr__(self, name: str) -> Callable:
        """`client.<task>(model, ...)` for every task registered in `sie_contract` (encode, score
        and extract have typed methods of their own)."""
        if name.startswith("_") or get_task(name) is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        run = self.run

        def call(model: str, *args: Any, **fields: Any):
            return run(name, model, *args, **fields)

        call.__name__ = name
        call.__doc__ = self._task(name).doc()
        return call

    # ---- the built-in tasks' typed calls: declared once, for both clients ------
    # `run` is a plain method in SIEClient and a coroutine function in AsyncSIEClient, so each
    # call below returns the result, or an awaitable of it, as its client's `run` does.
    def encode(self, model: str, items: Any, *, output_types: Sequence[str] | None = None, is_query: bool | None = None,
               instruction: str | None = None, dims: int | None = None, normalize: bool | None = None,
               output_dtype: str | None = None, truncate: bool | None = None, sparse_labels: bool | None = None,
               precision: str | None = None, template: bool | None = None, muvera: Mapping[str, int] | None = None,
               lora_id: str | None = None, profile: str | None = None, late_chunking: bool | None = None,
               batch_size: int | None = None, progress: bool | None = None) -> EncodeT:
        """Encode texts (a string, strings, or `{id?, text}` dicts) into dense / sparse / multivector outputs
        (an `EncodeResult`; awaited on the async client); `output_types=["muvera"]` adds each multivector's
        MUVERA encoding (`item.muvera`), with FastEmbed's parameters in `muvera` (k_sim, dim_proj, r_reps,
        random_seed); `lora_id` applies one of the card's LoRA adapters, `profile` one of its named profiles
        (an adapter and defaults for the other fields); `late_chunking=True` reads the items, one document's
        chunks in order, as one sequence (sent as one request whatever `batch_size` says)."""
        return cast(EncodeT, self.run(
            "encode", model, items, output_types=output_types, is_query=is_query, instruction=instruction,
            dims=dims, normalize=normalize, output_dtype=output_dtype, truncate=truncate,
            sparse_labels=sparse_labels, precision=precision, template=template,
            muvera=dict(muvera) if muvera is not None else None, lora_id=lora_id, profile=profile,
            late_chunking=late_chunking, batch_size=batch_size, progress=progress))

    def score(self, model: str, query: Any, items: Any, *, top_k: int | None = None, truncate: bool | None = None,
              instruction: str | None = None, batch_size: int | None = None, progress: bool | None = None) -> ScoreT:
        """Score items against a query; best first (`index` is the item's position in `items`): a
        `ScoreResult`, awaited on the async client."""
        return cast(ScoreT, self.run("score", model, query, items, top_k=top_k, truncate=truncate,
                                     instruction=instruction, batch_size=batch_size, progress=progress))

    def extract(self, model: str, items: Any, labels: Sequence[str] | None = None, *, threshold: float | None = None,
                flat: bool | None = None, multi_label: bool | None = None, hypothesis_template: str | None = None,
                top_k: int | None = None, raw_scores: bool | None = None, truncate: bool | None = None,
                entity_model: str | None = None,
                entity_labels: Sequence[str] | None = None, entity_threshold: float | None = None,
                classify: Mapping[str, Any] | None = None, relation_labels: Sequence[str] | None = None,
                task: str | None = None, prompt: str | None = None, max_new_tokens: int | None = None,
                text_threshold: float | None = None,
                batch_size: int | None = None, progress: bool | None = None) -> ExtractT:
        """Zero-shot entities with the given labels, per item (an `ExtractResult`; awaited on the async
        client); on a classification model (NLI or GLiClass), `classifications` per item, best first; on a
        relation model (GLiREL), `relations` between the entities each item carries (`{text, entities:
        [{start, end, label}]}`) or that `entity_model` (a GLiNER, with `entity_labels`) finds; on a
        GLiNER2 model, `classify={"task", "labels", "multi_label"?}` adds one classification, answered in
        `classifications`, and `relation_labels` relation types, answered in `relations`, beside the
        entities. A fixed-label classifier (sentiment, emotions, toxicity, language) takes no labels: it
        answers its own, the best one per item unless `top_k` asks for more (`raw_scores`: the logits). A
        document model (Donut) reads image items (`{"image": ...}`: bytes, a path or a PIL image) and PDFs
        (`{"document": <bytes or path>, "pages"?, "dpi"?}`, one answer per page with its `page`): each item's
        `text`, `data` (its parsed JSON) and, where the model gives boxes, `regions`; `prompt` is DocVQA's
        question; Florence-2 takes a `task` token (`<OCR>`, `<OD>`, `<CAPTION_TO_PHRASE_GROUNDING>`...) and,
        for the tasks that take one, its text input as `prompt`, and answers `data` as transformers'
        `post_process_generation` does (`{task: answer}`) and boxes, quad boxes or polygons as `regions`;
        `max_new_tokens` bounds the generated tokens (the card's bound at most). On an
        open-vocabulary detector (OWLv2, Grounding DINO), items are images too (PDFs for Grounding DINO), and
        each answers `regions`: the boxes found for the labels, in the image's pixels, scoring above
        `threshold` (default 0.1 for OWLv2, 0.25 for Grounding DINO, as transformers); on Grounding DINO a
        region's label is the prompt's words scoring above `text_threshold` (default 0.25) for its box."""
        return cast(ExtractT, self.run(
            "extract", model, items, labels, threshold=threshold, flat=flat, multi_label=multi_label,
            hypothesis_template=hypothesis_template, top_k=top_k, raw_scores=raw_scores, truncate=truncate,
            entity_model=entity_model,
            entity_labels=entity_labels, entity_threshold=entity_threshold, classify=classify,
            relation_labels=relation_labels, task=task, prompt=prompt, max_new_tokens=max_new_tokens,
            text_threshold=text_threshold, batch_size=batch_size,
            progress=progress))

    # each client's own: a method (SIEClient) or a coroutine function (AsyncSIEClient)
    run: Callable[..., Any]

    def _bar(self, total: int, progress: bool | None, desc: str):
        show = self.progress if progress is None else progress
        return tqdm(total=total, desc=desc, unit="item", disable=not show, leave=False)


class SIEClient(_Base[EncodeResult, ScoreResult, ExtractResult]):
    """Synchronous client.

    Example:
        client = SIEClient("http://127.0.0.1:8080")      # or SIEClient() for embedded mode
        vectors = client.encode("sentence-transformers/all-MiniLM-L6-v2", ["hello"]).dense_matrix()
    """

    def __init__(self, url: str | None = None, **options):
        super().__init__(url, **options)
        self._transport: EmbeddedTransport | HTTPTransport
        if self.embedded:
            self._transport = EmbeddedTransport(**self._embedded_options)
        else:
            self._transport = HTTPTransport(self.url, self.api_key, self.timeout, self.encoding)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # ---- plumbing ----------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call with retries (`retry`), within `timeout.total`: the decoded answer, or the last `SIEError`."""
        deadline = self.timeout.deadline()
        for attempt in self.retry.retrying(method, deadline):
            with attempt:
                return self._transport.request(method, path, body, deadline)
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="sie-client")
            return self._pool

    def _run_chunks(self, path: str, bodies: list[tuple[int, dict]], parse: Callable, total: int,
                    progress: bool | None, desc: str) -> list:
        """Send chunk bodies, at most `max_concurrency` at a time; parsed answers in chunk order."""
        with self._bar(total, progress, desc) as bar:
            def one(body: dict):
                result = parse(self.request("POST", path, body))
                bar.update(len(body["items"]))
                return result

            if len(bodies) == 1:
                return [one(bodies[0][1])]
            futures = [self._executor().submit(one, body) for _, body in bodies]
            try:
                return [future.result() for future in futures]
            finally:
                for future in futures:
                    future.cancel()

    # ---- API ---------------------------------------------------------------
    def run(self, task: str, model: str, /, *args: Any, batch_size: int | None = None, progress: bool | None = None,
            **fields: Any) -> Any:
        """Any registered task: `client.run("score", model, query, items, top_k=3)`. Large item lists
        go as `batch_size` chunks, `max_concurrency` at a time, merged into one result."""
        spec = self._task(task)
        total, bodies = self._bodies(spec, args, fields, batch_size)
        if not total:
            return wire.empty_result(spec.name, model)
        path = _model_path(spec.name, model)
        parts = self._run_chunks(path, bodies, lambda a: wire.parse_answer(spec.name, a, fields), total, progress,
                                 spec.name)
        return batching.merge(spec, model, [offset for offset, _ in bodies], parts, fields)

    def models(self) -> list[ModelInfo]:
        return [wire.parse_model(m) for m in self.request("GET", "/v1/models")["data"]]

    def model(self, model: str) -> ModelInfo:
        return wire.parse_model(self.request("GET", _model_path("models", model)))

    def close(self) -> None:
        self._transport.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> SIEClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncSIEClient(_Base[Awaitable[EncodeResult], Awaitable[ScoreResult], Awaitable[ExtractResult]]):
    """Asynchronous client; the same calls as `SIEClient`, awaited.

    Example:
        async with AsyncSIEClient("http://127.0.0.1:8080") as client:
            result = await client.encode("sentence-transformers/all-MiniLM-L6-v2", ["hello"])
    """

    def __init__(self, url: str | None = None, **options):
        super().__init__(url, **options)
        self._transport: AsyncEmbeddedTransport | AsyncHTTPTransport
        if self.embedded:
            self._transport = AsyncEmbeddedTransport(**self._embedded_options)
        else:
            self._transport = AsyncHTTPTransport(self.url, self.api_key, self.timeout, self.encoding)

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call with retries, awaited (see `SIEClient.request`)."""
        deadline = self.timeout.deadline()
        async for attempt in self.retry.async_retrying(method, deadline):
            with attempt:
                return await self._transport.request(method, path, body, deadline)
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    async def _run_chunks(self, path: str, bodies: list[tuple[int, dict]], parse: Callable, total: int,
                          progress: bool | None, desc: str) -> list:
        semaphore = asyncio.Semaphore(self.max_concurrency)
        with self._bar(total, progress, desc) as bar:
            async def one(body: dict):
                async with semaphore:
                    result = parse(await self.request("POST", path, body))
                bar.update(len(body["items"]))
                return result

            tasks = [asyncio.ensure_future(one(body)) for _, body in bodies]
            try:
                return await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()

    async def run(self, task: str, model: str, /, *args: Any, batch_size: int | None = None,
                  progress: bool | None = None, **fields: Any) -> Any:
        """Any registered task, awaited (see `SIEClient.run`)."""
        spec = self._task(task)
        total, bodies = self._bodies(spec, args, fields, batch_size)
        if not total:
            return wire.empty_result(spec.name, model)
        path = _model_path(spec.name, model)
        parts = await self._run_chunks(path, bodies, lambda a: wire.parse_answer(spec.name, a, fields), total,
                                       progress, spec.name)
        return batching.merge(spec, model, [offset for offset, _ in bodies], parts, fields)

    async def models(self) -> list[ModelInfo]:
        return [wire.parse_model(m) for m in (await self.request("GET", "/v1/models"))["data"]]

    async def model(self, model: str) -> ModelInfo:
        return wire.parse_model(await self.request("GET", _model_path("models", model)))

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncSIEClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def connect(client: SIEClient | None = None, *, url: str | None = None, api_key: str | None = None,
            timeout: TimeoutLike = None, **options) -> SIEClient:
    """The client an adapter uses: the one given, else a new one from the options
    (url / api_key default to `SIE_URL` / `SIE_API_KEY`; no url means embedded mode; timeout None
    means the client's default `Timeouts`)."""
    if client is not None:
        return client
    if timeout is not None:
        options["timeout"] = timeout
    return SIEClient(url, api_key=api_key, **options)
