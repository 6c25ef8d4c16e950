"""`SIEEntityExtractor`: a Haystack component that annotates documents with the
entities an SIE extraction model (GLiNER-style, zero-shot: any labels) finds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret

from .connection import DEFAULT_KEY, SIEConnection, connection_from_dict


@component
class SIEEntityExtractor(SIEConnection):
    """Example:
        extractor = SIEEntityExtractor(model="urchade/gliner_small-v2.1", labels=["person", "organization"])
        docs = extractor.run(documents=docs)["documents"]

    As Haystack's NamedEntityExtractor, each document's `meta["named_entities"]` lists its
    annotations in text order, here as JSON-ready dicts (so document stores keep them):
    `{"entity": label, "start", "end", "score", "text"}` with character offsets into the
    content, end exclusive.
    """

    def __init__(self, labels: list[str], model: str = "urchade/gliner_small-v2.1", url: str | None = None,
                 api_key: Secret = DEFAULT_KEY, timeout: float | None = None, threshold: float | None = None,
                 meta_key: str = "named_entities", batch_size: int = 32):
        SIEConnection.__init__(self, url, api_key, timeout)  # @component rebuilds the class: no bare super()
        self.labels = list(labels)
        self.model = model
        self.threshold = threshold
        self.meta_key = meta_key
        self.batch_size = batch_size

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, labels=self.labels, model=self.model, threshold=self.threshold,
                               meta_key=self.meta_key, batch_size=self.batch_size, **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SIEEntityExtractor":
        return default_from_dict(cls, connection_from_dict(data))

    def _annotated(self, documents: list[Document], result) -> dict[str, list[Document]]:
        out = []
        for doc, item in zip(documents, result.items):
            annotations = [{"entity": e.label, "start": e.start, "end": e.end, "score": e.score, "text": e.text}
                           for e in sorted(item.entities, key=lambda e: (e.start, e.end))]
            out.append(replace(doc, meta={**doc.meta, self.meta_key: annotations}))
        return {"documents": out}

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        if not documents:
            return {"documents": []}
        result = self.clients.sync.extract(self.model, [d.content or "" for d in documents], self.labels,
                                           threshold=self.threshold, batch_size=self.batch_size)
        return self._annotated(documents, result)

    @component.output_types(documents=list[Document])
    async def run_async(self, documents: list[Document]) -> dict[str, list[Document]]:
        if not documents:
            return {"documents": []}
        result = await self.clients.call("extract", self.model, [d.content or "" for d in documents], self.labels,
                                         threshold=self.threshold, batch_size=self.batch_size)
        return self._annotated(documents, result)
