"""`SIEEmbedding`: LlamaIndex's `BaseEmbedding` over an SIE dense model.

LlamaIndex embeds nodes with `get_text_embedding_batch` (SIE's document mode) and
queries with `get_query_embedding` (SIE's query mode); both have native async twins.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import Field, model_validator

from sie_client import DEFAULT_MODEL
from sie_client.adapters import renamed

from .connection import SIEConnection


class SIEEmbedding(SIEConnection, BaseEmbedding):
    """Example:
        Settings.embed_model = SIEEmbedding(model="sentence-transformers/all-MiniLM-L6-v2", url="http://127.0.0.1:8080")
        index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store))
    """

    # One SIE request per LlamaIndex batch: SIE batches by tokens itself, so larger is cheaper.
    embed_batch_size: int = Field(default=128, gt=0, le=2048)
    instruction: str | None = Field(default=None, description="Query instruction override.")
    dimensions: int | None = Field(default=None, description="Matryoshka truncation (`dims`: deprecated alias).")

    @model_validator(mode="before")
    @classmethod
    def _dims_alias(cls, values: Any) -> Any:
        return renamed(values, "dims", "dimensions", cls.__name__)

    @property
    def dims(self) -> int | None:
        """Deprecated: `dimensions`."""
        return self.dimensions

    def __init__(self, model: str | None = None, **kwargs: Any):
        # `model=` as in SIE's other adapters; LlamaIndex's field (and to_dict) says model_name.
        kwargs["model_name"] = model or kwargs.get("model_name") or DEFAULT_MODEL
        super().__init__(**kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "SIEEmbedding"

    def _options(self, is_query: bool) -> dict[str, Any]:
        return dict(output_types=["dense"], is_query=is_query, instruction=self.instruction if is_query else None,
                    dims=self.dimensions, progress=False)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._clients.sync.encode(self.model_name, [query], **self._options(True)).dense_matrix()[0].tolist()

    async def _aget_query_embedding(self, query: str) -> Embedding:
        result = await self._clients.call("encode", self.model_name, [query], **self._options(True))
        return result.dense_matrix()[0].tolist()

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._aget_text_embeddings([text]))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._clients.sync.encode(self.model_name, list(texts), **self._options(False)).dense_matrix().tolist()

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        result = await self._clients.call("encode", self.model_name, list(texts), **self._options(False))
        return result.dense_matrix().tolist()
