"""`SIETextEmbedder` (a query string -> its vector, SIE's query mode) and
`SIEDocumentEmbedder` (documents -> documents with `embedding`, SIE's document
mode): Haystack's embedder pair, for indexing and query pipelines."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret

from sie_client import DEFAULT_MODEL

from .connection import DEFAULT_KEY, SIEConnection, connection_from_dict, text_to_embed


def _meta(result) -> dict[str, Any]:
    return {"model": result.model, "usage": {"tokens": result.tokens}}


@component
class SIETextEmbedder(SIEConnection):
    """Example:
        query_pipeline.add_component("embedder", SIETextEmbedder(model="sentence-transformers/all-MiniLM-L6-v2"))
        query_pipeline.connect("embedder.embedding", "retriever.query_embedding")
    """

    def __init__(self, model: str = DEFAULT_MODEL, url: str | None = None, api_key: Secret = DEFAULT_KEY,
                 timeout: float | None = None, instruction: str | None = None, dims: int | None = None):
        """instruction: a query instruction for instruction-tuned models. dims: Matryoshka truncation."""
        SIEConnection.__init__(self, url, api_key, timeout)  # @component rebuilds the class: no bare super()
        self.model = model
        self.instruction = instruction
        self.dims = dims

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, instruction=self.instruction, dims=self.dims,
                               **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIETextEmbedder:
        return default_from_dict(cls, connection_from_dict(data))

    def _options(self) -> dict[str, Any]:
        return dict(output_types=["dense"], is_query=True, instruction=self.instruction, dims=self.dims)

    @staticmethod
    def _check(text: Any) -> None:
        if not isinstance(text, str):
            raise TypeError("SIETextEmbedder embeds one string; for documents use SIEDocumentEmbedder")

    @component.output_types(embedding=list[float], meta=dict[str, Any])
    def run(self, text: str) -> dict[str, Any]:
        self._check(text)
        result = self.clients.sync.encode(self.model, [text], **self._options())
        return {"embedding": result.dense_matrix()[0].tolist(), "meta": _meta(result)}

    @component.output_types(embedding=list[float], meta=dict[str, Any])
    async def run_async(self, text: str) -> dict[str, Any]:
        self._check(text)
        result = await self.clients.call("encode", self.model, [text], **self._options())
        return {"embedding": result.dense_matrix()[0].tolist(), "meta": _meta(result)}


@component
class SIEDocumentEmbedder(SIEConnection):
    """Example:
        indexing.add_component("embedder", SIEDocumentEmbedder(model="sentence-transformers/all-MiniLM-L6-v2"))
        indexing.add_component("writer", DocumentWriter(document_store=store))
        indexing.connect("embedder.documents", "writer.documents")

    meta_fields_to_embed: meta fields put before the content (joined by embedding_separator).
    batch_size: documents per SIE request. progress_bar: a bar over the documents.
    """

    def __init__(self, model: str = DEFAULT_MODEL, url: str | None = None, api_key: Secret = DEFAULT_KEY,
                 timeout: float | None = None, dims: int | None = None, batch_size: int = 128,
                 progress_bar: bool = True, meta_fields_to_embed: list[str] | None = None,
                 embedding_separator: str = "\n"):
        SIEConnection.__init__(self, url, api_key, timeout)  # @component rebuilds the class: no bare super()
        self.model = model
        self.dims = dims
        self.batch_size = batch_size
        self.progress_bar = progress_bar
        self.meta_fields_to_embed = meta_fields_to_embed or []
        self.embedding_separator = embedding_separator

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, dims=self.dims, batch_size=self.batch_size,
                               progress_bar=self.progress_bar, meta_fields_to_embed=self.meta_fields_to_embed,
                               embedding_separator=self.embedding_separator, **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIEDocumentEmbedder:
        return default_from_dict(cls, connection_from_dict(data))

    def _texts(self, documents: list[Document]) -> list[str]:
        if not isinstance(documents, list) or any(not isinstance(d, Document) for d in documents):
            raise TypeError("SIEDocumentEmbedder embeds a list of Documents; for a string use SIETextEmbedder")
        return [text_to_embed(d.content, d.meta, self.meta_fields_to_embed, self.embedding_separator)
                for d in documents]

    def _options(self) -> dict[str, Any]:
        return dict(output_types=["dense"], is_query=False, dims=self.dims, batch_size=self.batch_size,
                    progress=self.progress_bar)

    @staticmethod
    def _embedded(documents: list[Document], result) -> dict[str, Any]:
        vectors = result.dense_matrix().tolist() if documents else []
        return {"documents": [replace(d, embedding=v) for d, v in zip(documents, vectors)], "meta": _meta(result)}

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        return self._embedded(documents, self.clients.sync.encode(self.model, self._texts(documents),
                                                                  **self._options()))

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    async def run_async(self, documents: list[Document]) -> dict[str, Any]:
        result = await self.clients.call("encode", self.model, self._texts(documents), **self._options())
        return self._embedded(documents, result)
