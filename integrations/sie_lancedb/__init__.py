"""LanceDB integration: SIE embedding functions in LanceDB's registry ("sie" for
dense vectors, "sie-multivector" for late-interaction token vectors, "sie-image"
for images searched by text or image) and `SIEReranker` for vector, FTS and
hybrid search."""

from .embeddings import SIEEmbeddings, SIEMultiVectorEmbeddings
from .images import SIEImageEmbeddings
from .reranker import SIEReranker

__all__ = ["SIEEmbeddings", "SIEImageEmbeddings", "SIEMultiVectorEmbeddings", "SIEReranker"]
