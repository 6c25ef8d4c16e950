"""LanceDB integration: SIE embedding functions in LanceDB's registry ("sie" for
dense vectors, "sie-multivector" for late-interaction token vectors) and
`SIEReranker` for vector, FTS and hybrid search."""

from .embeddings import SIEEmbeddings, SIEMultiVectorEmbeddings
from .reranker import SIEReranker

__all__ = ["SIEEmbeddings", "SIEMultiVectorEmbeddings", "SIEReranker"]
