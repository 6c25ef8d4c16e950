"""Chroma embedding functions backed by SIE: dense (`SIEEmbeddingFunction`) and
sparse (`SIESparseEmbeddingFunction`), on chromadb 1.x's protocols.

Importing this package registers them with Chroma (under their import paths,
"sie_chroma.SIEEmbeddingFunction" and "sie_chroma.SIESparseEmbeddingFunction"),
which is what lets a persisted collection rebuild its function when reopened:
Chroma has no plugin discovery, so a program that reopens such a collection
imports sie_chroma first."""

from .embedding_function import SIEEmbeddingFunction
from .sparse_embedding_function import SIESparseEmbeddingFunction

__all__ = ["SIEEmbeddingFunction", "SIESparseEmbeddingFunction"]
