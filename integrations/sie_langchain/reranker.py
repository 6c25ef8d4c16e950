"""`SIEReranker`: a LangChain document compressor that reorders retrieved documents
by an SIE score model (cross-encoder or late interaction) and keeps the best `top_n`,
for `ContextualCompressionRetriever` or direct use."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

from .connection import SIEConnection


class SIEReranker(SIEConnection, BaseDocumentCompressor):
    """Example:
        retriever = ContextualCompressionRetriever(
            base_compressor=SIEReranker(model="cross-encoder/ms-marco-MiniLM-L-6-v2", top_n=5),
            base_retriever=store.as_retriever(search_kwargs={"k": 20}))

    Each returned document is a copy whose metadata carries `relevance_score` (the
    SIE score), as LangChain's other rerankers do; top_n=None keeps every document.
    """

    model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    top_n: int | None = 3
    batch_size: int | None = None

    @staticmethod
    def _reordered(documents: Sequence[Document], scored) -> list[Document]:
        out = []
        for s in scored.scores:
            doc = documents[s.index]
            out.append(Document(page_content=doc.page_content, metadata={**doc.metadata, "relevance_score": s.score},
                                id=doc.id))
        return out

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        documents = list(documents)
        if not documents:
            return []
        scored = self._clients.sync.score(self.model, query, [d.page_content for d in documents], top_k=self.top_n,
                                          batch_size=self.batch_size)
        return self._reordered(documents, scored)

    async def acompress_documents(self, documents: Sequence[Document], query: str,
                                  callbacks: Callbacks | None = None) -> Sequence[Document]:
        documents = list(documents)
        if not documents:
            return []
        scored = await self._clients.call("score", self.model, query, [d.page_content for d in documents],
                                          top_k=self.top_n, batch_size=self.batch_size)
        return self._reordered(documents, scored)
