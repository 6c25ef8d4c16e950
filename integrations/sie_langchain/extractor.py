"""`SIEEntityExtractor`: a LangChain document transformer that tags each document
with the entities an SIE extraction model (GLiNER-style, zero-shot: any labels)
finds in its text."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from langchain_core.documents import BaseDocumentTransformer, Document

from .connection import SIEConnection


class SIEEntityExtractor(SIEConnection, BaseDocumentTransformer):
    """Example:
        tagger = SIEEntityExtractor(model="urchade/gliner_small-v2.1", labels=["person", "organization"])
        docs = tagger.transform_documents(docs)   # doc.metadata["entities"] == [{"text", "label", "score", ...}]

    Each document comes back as a copy whose metadata holds, under `metadata_key`, its
    entities in text order: `{"text", "label", "score", "start", "end"}` (character offsets
    into `page_content`, end exclusive).
    """

    model: str = "urchade/gliner_small-v2.1"
    labels: list[str]
    threshold: Optional[float] = None
    metadata_key: str = "entities"
    batch_size: Optional[int] = None
    progress: Optional[bool] = None

    def _options(self) -> dict[str, Any]:
        return dict(threshold=self.threshold, batch_size=self.batch_size, progress=self.progress)

    def _tagged(self, documents: Sequence[Document], result) -> list[Document]:
        out = []
        for doc, item in zip(documents, result.items):
            entities = [{"text": e.text, "label": e.label, "score": e.score, "start": e.start, "end": e.end}
                        for e in sorted(item.entities, key=lambda e: (e.start, e.end))]
            out.append(Document(page_content=doc.page_content, metadata={**doc.metadata, self.metadata_key: entities},
                                id=doc.id))
        return out

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
