"""Chroma embedding functions backed by SIE: dense (`SIEEmbeddingFunction`) and
sparse (`SIESparseEmbeddingFunction`), on chromadb 1.x's protocols and registered
under the names "sie" and "sie-sparse" so a persisted collection reopens with them."""

from .embedding_function import SIEEmbeddingFunction
from .sparse_embedding_function import SIESparseEmbeddingFunction

__all__ = ["SIEEmbeddingFunction", "SIESparseEmbeddingFunction"]
