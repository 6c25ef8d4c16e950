"""`SIESparseEmbeddingFunction`: chromadb's SparseEmbeddingFunction protocol over a
sparse SIE model (SPLADE-style), for a collection schema's sparse vector index."""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
from chromadb.api.types import Documents, SparseEmbeddingFunction, SparseVectors
from chromadb.base_types import SparseVector
from chromadb.utils.embedding_functions import register_sparse_embedding_function

from sie_client import SIEClient

from .config import PERSISTED, check_config, make_client


def to_chroma(sparse) -> SparseVector:
    """SIE's sparse output -> chromadb's SparseVector (indices strictly ascending, as Chroma requires)."""
    order = np.argsort(sparse.indices, kind="stable")
    return SparseVector(indices=[int(i) for i in sparse.indices[order]], values=[float(v) for v in sparse.values[order]])


@register_sparse_embedding_function
class SIESparseEmbeddingFunction(SparseEmbeddingFunction[Documents]):
    """Sparse (vocabulary-weight) embeddings from an SIE model.

    Example:
        schema.create_index(config=SparseVectorIndexConfig(
            source_key=K.DOCUMENT, embedding_function=SIESparseEmbeddingFunction(model="my/splade")), key="sparse")
    """

    def __init__(self, model: str, url: str | None = None, api_key: str | None = None, *,
                 api_key_env_var: str = "SIE_API_KEY", timeout: float | None = None, instruction: str | None = None,
                 dims: int | None = None, batch_size: int | None = None, client: SIEClient | None = None):
        self.model = model
        self.url = url
        self.api_key_env_var = api_key_env_var
        self.timeout = timeout
        self.instruction = instruction
        self.dims = dims  # unused for sparse outputs; kept so both functions persist the same keys
        self.batch_size = batch_size
        self._client = make_client(url, api_key, api_key_env_var, timeout, client)

    def _encode(self, input: Documents, is_query: bool) -> SparseVectors:
        texts = [input] if isinstance(input, str) else list(input)
        result = self._client.encode(self.model, texts, output_types=["sparse"], is_query=is_query,
                                     instruction=self.instruction if is_query else None, batch_size=self.batch_size)
        return [to_chroma(item.sparse) for item in result.items]

    def __call__(self, input: Documents) -> SparseVectors:
        return self._encode(input, is_query=False)

    def embed_query(self, input: Documents) -> SparseVectors:
        return self._encode(input, is_query=True)

    @staticmethod
    def name() -> str:
        return "sie-sparse"

    def get_config(self) -> Dict[str, Any]:
        return {key: getattr(self, key) for key in PERSISTED}

    @staticmethod
    def build_from_config(config: Dict[str, Any]) -> "SIESparseEmbeddingFunction":
        SIESparseEmbeddingFunction.validate_config(config)
        return SIESparseEmbeddingFunction(**config)

    @staticmethod
    def validate_config(config: Dict[str, Any]) -> None:
        check_config(config, "SIESparseEmbeddingFunction")
