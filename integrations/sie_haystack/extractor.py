"""`SIEEntityExtractor`: a Haystack component that annotates documents with the
entities an SIE extraction model (GLiNER-style, zero-shot: any labels) finds, and the
relation triples of a GLiNER2 or relation (GLiREL) model."""

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

    Relations, under `meta["relations"]` (`relations_key`), as `{"head", "relation", "tail",
    "score"}` with head and tail annotated as above: a GLiNER2 model takes the entity types in
    `labels` and the relation types in `relation_labels`; a relation model (GLiREL) the relation
    types in `labels`, and its `entity_model` (a GLiNER) finds the entities of `entity_labels`.
    """

    def __init__(self, labels: list[str], model: str = "urchade/gliner_small-v2.1", url: str | None = None,
                 api_key: Secret = DEFAULT_KEY, timeout: float | None = None, threshold: float | None = None,
                 meta_key: str = "named_entities", batch_size: int = 32, relation_labels: list[str] | None = None,
                 entity_model: str | None = None, entity_labels: list[str] | None = None,
                 relations_key: str = "relations", max_retries: int | None = None):
        SIEConnection.__init__(self, url, api_key, timeout, max_retries)  # @component rebuilds the class
        self.labels = list(labels)
        self.model = model
        self.threshold = threshold
        self.meta_key = meta_key
        self.batch_size = batch_size
        self.relation_labels = None if relation_labels is None else list(relation_labels)
        self.entity_model = entity_model
        self.entity_labels = None if entity_labels is None else list(entity_labels)
        self.relations_key = relations_key

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, labels=self.labels, model=self.model, threshold=self.threshold,
                               meta_key=self.meta_key, batch_size=self.batch_size,
                               relation_labels=self.relation_labels, entity_model=self.entity_model,
                               entity_labels=self.entity_labels, relations_key=self.relations_key,
                               **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIEEntityExtractor:
        return default_from_dict(cls, connection_from_dict(data))

    def _options(self) -> dict[str, Any]:
        return dict(threshold=self.threshold, batch_size=self.batch_size, relation_labels=self.relation_labels,
                    entity_model=self.entity_model, entity_labels=self.entity_labels)

    @staticmethod
    def _annotation(e) -> dict[str, Any]:
        return {"entity": e.label, "start": e.start, "end": e.end, "score": e.score, "text": e.text}

    def _annotated(self, documents: list[Document], result) -> dict[str, list[Document]]:
        out = []
        for doc, item in zip(documents, result.items):
            meta = {**doc.meta, self.meta_key: [self._annotation(e) for e in
                                                sorted(item.entities, key=lambda e: (e.start, e.end))]}
            if item.relations is not None:
                meta[self.relations_key] = [{"head": self._annotation(r.head), "relation": r.relation,
                                             "tail": self._annotation(r.tail), "score": r.score}
                                            for r in item.relations]
            out.append(replace(doc, meta=meta))
        return {"documents": out}

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        if not documents:
            return {"documents": []}
        result = self.sync_client.extract(self.model, [d.content or "" for d in documents], self.labels,
                                           **self._options())
        return self._annotated(documents, result)

    @component.output_types(documents=list[Document])
    async def run_async(self, documents: list[Document]) -> dict[str, list[Document]]:
        if not documents:
            return {"documents": []}
        result = await self.call_async("extract", self.model, [d.content or "" for d in documents], self.labels,
                                         **self._options())
        return self._annotated(documents, result)
