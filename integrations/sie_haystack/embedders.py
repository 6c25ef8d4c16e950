"""`SIETextEmbedder` (a query string -> its vector, SIE's query mode) and
`SIEDocumentEmbedder` (documents -> documents with `embedding`, SIE's document
mode): Haystack's embedder pair, for indexing and query pipelines.

Their settings are those of Haystack's OpenAI embedders where the two meet: `dimensions`
(`dims` is its deprecated alias), `prefix` / `suffix`, `timeout`, `max_retries`, and for the
document embedder `batch_size`, `progress_bar`, `meta_fields_to_embed`,
`embedding_separator` and `raise_on_failure`."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret

from sie_client import DEFAULT_MODEL, SIEError

from .connection import DEFAULT_KEY, SIEConnection, connection_from_dict, dimensions_setting, text_to_embed

logger = logging.getLogger(__name__)

# Answers that blame the texts of one request: the other batches can still succeed. Any other
# error (a wrong key, an unknown model, an unreachable server) would fail every batch alike.
_PER_BATCH_STATUSES = (400, 413)


def _meta(result) -> dict[str, Any]:
    return {"model": result.model, "usage": {"tokens": result.tokens}}


@component
class SIETextEmbedder(SIEConnection):
    """Example:
        query_pipeline.add_component("embedder", SIETextEmbedder(model="sentence-transformers/all-MiniLM-L6-v2"))
        query_pipeline.connect("embedder.embedding", "retriever.query_embedding")
    """

    def __init__(self, model: str = DEFAULT_MODEL, url: str | None = None, api_key: Secret = DEFAULT_KEY,
                 timeout: float | None = None, instruction: str | None = None, dimensions: int | None = None,
                 prefix: str = "", suffix: str = "", max_retries: int | None = None, *, dims: int | None = None):
        """instruction: a query instruction for instruction-tuned models. dimensions: Matryoshka
        truncation. prefix / suffix: strings put around the text. max_retries: retries of a failed
        call after the first try (None: the client's default)."""
        SIEConnection.__init__(self, url, api_key, timeout, max_retries)  # @component rebuilds the class
        self.model = model
        self.instruction = instruction
        self.dimensions = dimensions_setting(dimensions, dims, "SIETextEmbedder")
        self.prefix = prefix
        self.suffix = suffix

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, instruction=self.instruction, dimensions=self.dimensions,
                               prefix=self.prefix, suffix=self.suffix, **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIETextEmbedder:
        return default_from_dict(cls, connection_from_dict(data))

    def _options(self) -> dict[str, Any]:
        return dict(output_types=["dense"], is_query=True, instruction=self.instruction, dims=self.dimensions)

    def _text(self, text: Any) -> str:
        if not isinstance(text, str):
            raise TypeError("SIETextEmbedder embeds one string; for documents use SIEDocumentEmbedder")
        return self.prefix + text + self.suffix

    @component.output_types(embedding=list[float], meta=dict[str, Any])
    def run(self, text: str) -> dict[str, Any]:
        result = self.sync_client.encode(self.model, [self._text(text)], **self._options())
        return {"embedding": result.dense_matrix()[0].tolist(), "meta": _meta(result)}

    @component.output_types(embedding=list[float], meta=dict[str, Any])
    async def run_async(self, text: str) -> dict[str, Any]:
        result = await self.call_async("encode", self.model, [self._text(text)], **self._options())
        return {"embedding": result.dense_matrix()[0].tolist(), "meta": _meta(result)}


@component
class SIEDocumentEmbedder(SIEConnection):
    """Example:
        indexing.add_component("embedder", SIEDocumentEmbedder(model="sentence-transformers/all-MiniLM-L6-v2"))
        indexing.add_component("writer", DocumentWriter(document_store=store))
        indexing.connect("embedder.documents", "writer.documents")

    meta_fields_to_embed: meta fields put before the content (joined by embedding_separator).
    prefix / suffix: strings put around each text. batch_size: documents per SIE request.
    progress_bar: a bar over the documents. raise_on_failure: False (Haystack's default) logs a
    failed request and returns its documents without `embedding`; True raises the `SIEError`.
    """

    def __init__(self, model: str = DEFAULT_MODEL, url: str | None = None, api_key: Secret = DEFAULT_KEY,
                 timeout: float | None = None, dimensions: int | None = None, batch_size: int = 128,
                 progress_bar: bool = True, meta_fields_to_embed: list[str] | None = None,
                 embedding_separator: str = "\n", prefix: str = "", suffix: str = "",
                 max_retries: int | None = None, *, raise_on_failure: bool = False, dims: int | None = None):
        SIEConnection.__init__(self, url, api_key, timeout, max_retries)  # @component rebuilds the class
        self.model = model
        self.dimensions = dimensions_setting(dimensions, dims, "SIEDocumentEmbedder")
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.meta_fields_to_embed = meta_fields_to_embed or []
        self.embedding_separator = embedding_separator
        self.prefix = prefix
        self.suffix = suffix
        self.raise_on_failure = raise_on_failure

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, dimensions=self.dimensions, batch_size=self.batch_size,
                               progress_bar=self.progress_bar, meta_fields_to_embed=self.meta_fields_to_embed,
                               embedding_separator=self.embedding_separator, prefix=self.prefix,
                               suffix=self.suffix, raise_on_failure=self.raise_on_failure,
                               **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIEDocumentEmbedder:
        return default_from_dict(cls, connection_from_dict(data))

    def _texts(self, documents: list[Document]) -> list[str]:
        if not isinstance(documents, list) or any(not isinstance(d, Document) for d in documents):
            raise TypeError("SIEDocumentEmbedder embeds a list of Documents; for a string use SIETextEmbedder")
        return [text_to_embed(d.content, d.meta, self.meta_fields_to_embed, self.embedding_separator,
                              self.prefix, self.suffix) for d in documents]

    def _options(self) -> dict[str, Any]:
        return dict(output_types=["dense"], is_query=False, dims=self.dimensions, batch_size=self.batch_size,
                    progress=self.progress_bar)

    def _batches(self, n: int) -> list[range]:
        return [range(start, min(start + self.batch_size, n)) for start in range(0, n, self.batch_size)]

    def _failed(self, documents: list[Document], exc: SIEError) -> None:
        """Log (or, with raise_on_failure, raise) a failed request for these documents."""
        if self.raise_on_failure:
            raise exc
        logger.error("SIEDocumentEmbedder: embedding of documents %s failed: %s",
                     ", ".join(d.id for d in documents), exc)

    @staticmethod
    def _embedded(documents: list[Document], vectors: list[list[float] | None],
                  meta: dict[str, Any]) -> dict[str, Any]:
        return {"documents": [replace(d, embedding=v) if v is not None else replace(d)
                              for d, v in zip(documents, vectors)], "meta": meta}

    def _salvage(self, documents: list[Document], exc: SIEError) -> tuple[list[list[float] | None], list[range]]:
        """After a failed call: every document without a vector, and the batches worth sending
        again one by one (none unless the error blamed the texts)."""
        self._failed(documents, exc)
        retry = self._batches(len(documents)) if exc.status in _PER_BATCH_STATUSES else []
        return [None] * len(documents), retry

    @staticmethod
    def _add(meta: dict[str, Any], vectors: list, batch: range, result) -> None:
        for i, v in zip(batch, result.dense_matrix().tolist()):
            vectors[i] = v
        meta.setdefault("model", result.model)
        usage = meta.setdefault("usage", {"tokens": 0})
        usage["tokens"] += result.tokens

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        texts = self._texts(documents)
        try:
            result = self.sync_client.encode(self.model, texts, **self._options())
        except SIEError as exc:
            vectors, retry = self._salvage(documents, exc)
            meta: dict[str, Any] = {}
            for batch in retry:
                try:
                    self._add(meta, vectors, batch, self.sync_client.encode(
                        self.model, texts[batch.start:batch.stop], **self._options()))
                except SIEError as batch_exc:
                    self._failed(documents[batch.start:batch.stop], batch_exc)
            return self._embedded(documents, vectors, meta)
        return self._embedded(documents, result.dense_matrix().tolist() if documents else [], _meta(result))

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    async def run_async(self, documents: list[Document]) -> dict[str, Any]:
        texts = self._texts(documents)
        try:
            result = await self.call_async("encode", self.model, texts, **self._options())
        except SIEError as exc:
            vectors, retry = self._salvage(documents, exc)
            meta: dict[str, Any] = {}
            for batch in retry:
                try:
                    self._add(meta, vectors, batch, await self.call_async(
                        "encode", self.model, texts[batch.start:batch.stop], **self._options()))
                except SIEError as batch_exc:
                    self._failed(documents[batch.start:batch.stop], batch_exc)
            return self._embedded(documents, vectors, meta)
        return self._embedded(documents, result.dense_matrix().tolist() if documents else [], _meta(result))
