"""`SIERanker`: a Haystack ranker over an SIE score model (cross-encoder or late
interaction): documents come back best first, each `score` set to SIE's score."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret

from .connection import DEFAULT_KEY, SIEConnection, connection_from_dict, text_to_embed


@component
class SIERanker(SIEConnection):
    """Example:
        pipeline.add_component("ranker", SIERanker(model="cross-encoder/ms-marco-MiniLM-L-6-v2", top_k=5))
        pipeline.connect("retriever.documents", "ranker.documents")

    meta_fields_to_embed: meta fields put before the content when scoring.
    """

    def __init__(self, model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2", url: str | None = None,
                 api_key: Secret = DEFAULT_KEY, timeout: float | None = None, top_k: int | None = 10,
                 meta_fields_to_embed: list[str] | None = None, embedding_separator: str = "\n",
                 max_retries: int | None = None):
        """max_retries: retries of a failed call after the first try (None: the client's default)."""
        SIEConnection.__init__(self, url, api_key, timeout, max_retries)  # @component rebuilds the class
        if top_k is not None and top_k <= 0:
            raise ValueError(f"top_k must be > 0, got {top_k}")
        self.model = model
        self.top_k = top_k
        self.meta_fields_to_embed = meta_fields_to_embed or []
        self.embedding_separator = embedding_separator

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, top_k=self.top_k, meta_fields_to_embed=self.meta_fields_to_embed,
                               embedding_separator=self.embedding_separator, **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIERanker:
        return default_from_dict(cls, connection_from_dict(data))

    def _texts(self, documents: list[Document]) -> list[str]:
        return [text_to_embed(d.content, d.meta, self.meta_fields_to_embed, self.embedding_separator)
                for d in documents]

    @staticmethod
    def _ranked(documents: list[Document], scored) -> dict[str, list[Document]]:
        return {"documents": [replace(documents[s.index], score=s.score) for s in scored.scores]}

    @component.output_types(documents=list[Document])
    def run(self, query: str, documents: list[Document], top_k: int | None = None) -> dict[str, list[Document]]:
        """documents best first by SIE's score for `query`; top_k overrides the instance's."""
        if not documents:
            return {"documents": []}
        top_k = self.top_k if top_k is None else top_k
        return self._ranked(documents, self.sync_client.score(self.model, query, self._texts(documents), top_k=top_k))

    @component.output_types(documents=list[Document])
    async def run_async(self, query: str, documents: list[Document],
                        top_k: int | None = None) -> dict[str, list[Document]]:
        if not documents:
            return {"documents": []}
        top_k = self.top_k if top_k is None else top_k
        scored = await self.call_async("score", self.model, query, self._texts(documents), top_k=top_k)
        return self._ranked(documents, scored)
