"""`SIESparseEmbeddings`: langchain-qdrant's `SparseEmbeddings` interface (LangChain's
only sparse one) over an SIE sparse model, for `QdrantVectorStore` in SPARSE or
HYBRID retrieval mode. Needs langchain-qdrant."""

from __future__ import annotations

from typing import Any

from langchain_qdrant import SparseEmbeddings, SparseVector

from .connection import ShowProgress, SIEConnection


def _to_langchain(sparse) -> SparseVector:
    return SparseVector(indices=sparse.indices.astype(int).tolist(), values=sparse.values.astype(float).tolist())


class SIESparseEmbeddings(SIEConnection, ShowProgress, SparseEmbeddings):
    """Vocabulary-weight vectors from an SIE sparse (SPLADE-style) model.

    Example:
        store = QdrantVectorStore.from_texts(texts, SIEEmbeddings(), sparse_embedding=SIESparseEmbeddings(
            model="sie/splade-tiny"), retrieval_mode=RetrievalMode.HYBRID, location=":memory:", collection_name="docs")
    """

    model: str
    instruction: str | None = None
    batch_size: int | None = None

    def _options(self, is_query: bool) -> dict[str, Any]:
        return dict(output_types=["sparse"], is_query=is_query, instruction=self.instruction if is_query else None,
                    batch_size=self.batch_size, progress=False if is_query else self.show_progress)

    def embed_documents(self, texts: list[str]) -> list[SparseVector]:
        result = self._clients.sync.encode(self.model, list(texts), **self._options(False))
        return [_to_langchain(item.sparse) for item in result.items]

    def embed_query(self, text: str) -> SparseVector:
        return _to_langchain(self._clients.sync.encode(self.model, [text], **self._options(True)).items[0].sparse)

    async def aembed_documents(self, texts: list[str]) -> list[SparseVector]:
        result = await self._clients.call("encode", self.model, list(texts), **self._options(False))
        return [_to_langchain(item.sparse) for item in result.items]

    async def aembed_query(self, text: str) -> SparseVector:
        result = await self._clients.call("encode", self.model, [text], **self._options(True))
        return _to_langchain(result.items[0].sparse)
