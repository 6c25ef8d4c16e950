"""`SIEEmbeddings`: LangChain's `Embeddings` interface over an SIE dense model.

`embed_documents` uses SIE's document mode and `embed_query` its query mode,
which differ for models with query templates or instructions (E5, BGE, ...):
LangChain vector stores call the one or the other, so retrieval gets both right.
"""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings
from pydantic import model_validator

from sie_client import DEFAULT_MODEL
from sie_client.adapters import renamed

from .connection import ShowProgress, SIEConnection


class SIEEmbeddings(SIEConnection, ShowProgress, Embeddings):
    """Dense vectors from an SIE model.

    Example:
        embeddings = SIEEmbeddings(model="sentence-transformers/all-MiniLM-L6-v2", url="http://127.0.0.1:8080")
        store = QdrantVectorStore.from_texts(texts, embeddings, location=":memory:", collection_name="docs")

    instruction: a query instruction for instruction-tuned models (SIE's card default otherwise).
    dimensions: Matryoshka truncation (OpenAIEmbeddings' name; `dims` is a deprecated alias).
    batch_size: texts per SIE request. show_progress: a progress bar over `embed_documents`.
    """

    model: str = DEFAULT_MODEL
    instruction: str | None = None
    dimensions: int | None = None
    batch_size: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _dims_alias(cls, values: Any) -> Any:
        return renamed(values, "dims", "dimensions", cls.__name__)

    @property
    def dims(self) -> int | None:
        """Deprecated: `dimensions`."""
        return self.dimensions

    def _options(self, is_query: bool) -> dict[str, Any]:
        return dict(output_types=["dense"], is_query=is_query, instruction=self.instruction if is_query else None,
                    dims=self.dimensions, batch_size=self.batch_size,
                    progress=False if is_query else self.show_progress)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._clients.sync.encode(self.model, list(texts), **self._options(False)).dense_matrix().tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._clients.sync.encode(self.model, [text], **self._options(True)).dense_matrix()[0].tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        result = await self._clients.call("encode", self.model, list(texts), **self._options(False))
        return result.dense_matrix().tolist()

    async def aembed_query(self, text: str) -> list[float]:
        result = await self._clients.call("encode", self.model, [text], **self._options(True))
        return result.dense_matrix()[0].tolist()
