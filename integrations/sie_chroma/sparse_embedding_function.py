"""`SIESparseEmbeddingFunction`: chromadb's SparseEmbeddingFunction protocol over a
sparse SIE model (SPLADE-style), for a collection schema's sparse vector index."""

from __future__ import annotations

from typing import Any

import numpy as np
from chromadb.api.types import Documents, SparseEmbeddingFunction, SparseVectors
from chromadb.base_types import SparseVector
from chromadb.utils.embedding_functions import register_sparse_embedding_function, sparse_known_embedding_functions

from sie_client import SIEClient

from .config import PERSISTED, check_config, check_update, known_config, make_client, rebuilt_client

NAME = "sie_chroma.SIESparseEmbeddingFunction"  # the import path, as for the dense function
LEGACY_NAMES = ("sie-sparse",)  # written by sie_chroma 0.1.0


def to_chroma(sparse) -> SparseVector:
    """SIE's sparse output -> chromadb's SparseVector (indices strictly ascending, as Chroma requires),
    with `labels`: the vocabulary token of each index, as Chroma's own sparse functions give them."""
    order = np.argsort(sparse.indices, kind="stable")
    labels = [sparse.labels[i] for i in order] if sparse.labels is not None else None
    return SparseVector(indices=[int(i) for i in sparse.indices[order]],
                        values=[float(v) for v in sparse.values[order]], labels=labels)


@register_sparse_embedding_function
class SIESparseEmbeddingFunction(SparseEmbeddingFunction[Documents]):
    """Sparse (vocabulary-weight) embeddings from an SIE model.

    Example:
        sparse = SIESparseEmbeddingFunction(model="sie/splade-tiny")
        schema.create_index(config=SparseVectorIndexConfig(source_key=K.DOCUMENT, embedding_function=sparse),
                            key="sparse")
    """

    def __init__(self, model: str, url: str | None = None, api_key: str | None = None, *,
                 api_key_env_var: str = "SIE_API_KEY", timeout: float | None = None, instruction: str | None = None,
                 dims: int | None = None, batch_size: int | None = None, progress: bool | None = None,
                 client: SIEClient | None = None):
        self._client = make_client(url, api_key, api_key_env_var, timeout, client)
        self.model = model
        self.url = self._client.url  # the effective URL, persisted (see config.py)
        self.api_key_env_var = api_key_env_var
        self.timeout = timeout
        self.instruction = instruction
        self.dims = dims  # unused for sparse outputs; kept so both functions persist the same keys
        self.batch_size = batch_size
        self.progress = progress

    def _encode(self, input: Documents, is_query: bool) -> SparseVectors:
        texts = [input] if isinstance(input, str) else list(input)
        result = self._client.encode(self.model, texts, output_types=["sparse"], sparse_labels=True, is_query=is_query,
                                     instruction=self.instruction if is_query else None, batch_size=self.batch_size,
                                     progress=self.progress and not is_query)
        return [to_chroma(item.sparse) for item in result.items]

    def __call__(self, input: Documents) -> SparseVectors:
        return self._encode(input, is_query=False)

    def embed_query(self, input: Documents) -> SparseVectors:
        return self._encode(input, is_query=True)

    @staticmethod
    def name() -> str:
        return NAME

    def get_config(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in PERSISTED}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> SIESparseEmbeddingFunction:
        SIESparseEmbeddingFunction.validate_config(config)
        config = known_config(config, "SIESparseEmbeddingFunction")
        return SIESparseEmbeddingFunction(**config, client=rebuilt_client(config))

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        check_config(config, "SIESparseEmbeddingFunction")

    def validate_config_update(self, old_config: dict[str, Any], new_config: dict[str, Any]) -> None:
        check_update(old_config, new_config)


for _name in LEGACY_NAMES:
    sparse_known_embedding_functions[_name] = SIESparseEmbeddingFunction
