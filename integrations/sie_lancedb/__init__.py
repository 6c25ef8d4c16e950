"""LanceDB integration: SIE embedding functions in LanceDB's registry ("sie" for
dense vectors, "sie-multivector" for late-interaction token vectors, "sie-muvera" for
their MUVERA encodings (one vector per text), "sie-image"
for images searched by text or image) and `SIEReranker` for vector, FTS and
hybrid search."""

from .embeddings import SIEEmbeddings, SIEMultiVectorEmbeddings, SIEMuveraEmbeddings
from .images import SIEImageEmbeddings
from .reranker import SIEReranker

__all__ = ["SIEEmbeddings", "SIEImageEmbeddings", "SIEMultiVectorEmbeddings", "SIEMuveraEmbeddings", "SIEReranker"]
