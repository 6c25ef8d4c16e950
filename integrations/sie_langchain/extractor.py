"""`SIEEntityExtractor`: a LangChain document transformer that tags each document
with what an SIE extraction model finds in its text, zero-shot (any labels): the
entities of an entity model (GLiNER-style), the classes of a classification model
(NLI zero-shot, GLiClass), the relation triples of a GLiNER2 or relation (GLiREL) model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import BaseDocumentTransformer, Document

from .connection import ShowProgress, SIEConnection


class SIEEntityExtractor(SIEConnection, ShowProgress, BaseDocumentTransformer):
    """Example:
        tagger = SIEEntityExtractor(model="urchade/gliner_small-v2.1", labels=["person", "organization"])
        docs = tagger.transform_documents(docs)   # doc.metadata["entities"] == [{"text", "label", "score", ...}]

    Each document comes back as a copy whose metadata holds, under `metadata_key`, its
    entities in text order: `{"text", "label", "score", "start", "end"}` (character offsets
    into `page_content`, end exclusive). With a classification model the labels are the
    candidate classes and the metadata holds, under `classes_key`, `{"label", "score"}`
    best first (`multi_label`, `top_k` and `threshold` as in SIE's extract):

        router = SIEEntityExtractor(model="MoritzLaurer/deberta-v3-base-zeroshot-v2.0",
                                    labels=["billing", "bug report", "feature request"], top_k=1)

    Relations, under `relations_key`, as `{"head", "relation", "tail", "score"}` (head and tail:
    entities as above): a GLiNER2 model takes the entity types in `labels` and the relation types
    in `relation_labels`; a relation model (GLiREL) the relation types in `labels`, and its
    `entity_model` (a GLiNER) finds the entities of `entity_labels` first:

        graph = SIEEntityExtractor(model="fastino/gliner2-base-v1", labels=["person", "organization"],
                                   relation_labels=["works_for", "founded"])
    """

    model: str = "urchade/gliner_small-v2.1"
    labels: list[str]
    threshold: float | None = None
    metadata_key: str = "entities"
    classes_key: str = "classifications"
    relations_key: str = "relations"
    multi_label: bool | None = None
    top_k: int | None = None
    relation_labels: list[str] | None = None
    entity_model: str | None = None
    entity_labels: list[str] | None = None
    batch_size: int | None = None

    def _options(self) -> dict[str, Any]:
        return dict(threshold=self.threshold, multi_label=self.multi_label, top_k=self.top_k,
                    relation_labels=self.relation_labels, entity_model=self.entity_model,
                    entity_labels=self.entity_labels, batch_size=self.batch_size, progress=self.show_progress)

    @staticmethod
    def _entity(e) -> dict[str, Any]:
        return {"text": e.text, "label": e.label, "score": e.score, "start": e.start, "end": e.end}

    def _tags(self, item) -> dict[str, Any]:
        tags: dict[str, Any] = {}
        if item.classifications is not None:  # a classification model (or GLiNER2's classify)
            tags[self.classes_key] = [{"label": c.label, "score": c.score} for c in item.classifications]
        if item.classifications is None or item.entities:
            tags[self.metadata_key] = [self._entity(e) for e in sorted(item.entities, key=lambda e: (e.start, e.end))]
        if item.relations is not None:  # a GLiNER2 model with relation_labels, or a relation model
            tags[self.relations_key] = [{"head": self._entity(r.head), "relation": r.relation,
                                         "tail": self._entity(r.tail), "score": r.score} for r in item.relations]
        return tags

    def _tagged(self, documents: Sequence[Document], result) -> list[Document]:
        return [Document(page_content=doc.page_content, metadata={**doc.metadata, **self._tags(item)}, id=doc.id)
                for doc, item in zip(documents, result.items)]

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        documents = list(documents)
        if not documents:
            return []
        result = self._clients.sync.extract(self.model, [d.page_content for d in documents], self.labels,
                                            **self._options())
        return self._tagged(documents, result)

    async def atransform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        documents = list(documents)
        if not documents:
            return []
        result = await self._clients.call("extract", self.model, [d.page_content for d in documents], self.labels,
                                          **self._options())
        return self._tagged(documents, result)
