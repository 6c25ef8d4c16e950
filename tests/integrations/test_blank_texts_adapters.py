"""Every adapter passes an empty or blank text through to SIE, which embeds it as
sentence-transformers does (#29.2): Chroma's `add`, LangChain, LlamaIndex, Qdrant and Haystack
(`content=None` is the empty text), each against a real SIE server on loopback. One blank field
must not lose the batch it is in."""

from __future__ import annotations

import numpy as np
import pytest

from integration_recall import MODEL
from sie_client import SIEClient

TEXTS = ["", "   ", "\n", "apt installs Debian packages."]


@pytest.fixture(scope="module")
def expected():
    """sentence-transformers' vectors of TEXTS on the same weights."""
    from sentence_transformers import SentenceTransformer

    from tiny_models import MINILM_DIR

    return SentenceTransformer(str(MINILM_DIR), device="cpu").encode(TEXTS, normalize_embeddings=True)


def close(got, want) -> None:
    np.testing.assert_allclose(np.asarray(got, dtype=np.float32), np.asarray(want, dtype=np.float32), atol=1e-5)


def test_chroma_add_with_blank_documents(sie_url, expected):
    chromadb = pytest.importorskip("chromadb")
    from chromadb.config import Settings

    from sie_chroma import SIEEmbeddingFunction

    collection = chromadb.EphemeralClient(Settings(anonymized_telemetry=False)).create_collection(
        "blanks", embedding_function=SIEEmbeddingFunction(model=MODEL, url=sie_url))
    collection.add(ids=[str(i) for i in range(len(TEXTS))], documents=TEXTS)
    stored = collection.get(ids=[str(i) for i in range(len(TEXTS))], include=["embeddings"])
    close(stored["embeddings"], expected)


def test_langchain_embeds_blank_documents_and_queries(sie_url, expected):
    pytest.importorskip("langchain_core")
    from sie_langchain import SIEEmbeddings

    embeddings = SIEEmbeddings(model=MODEL, url=sie_url)
    close(embeddings.embed_documents(TEXTS), expected)
    close(embeddings.embed_query(""), expected[0])


def test_llamaindex_embeds_blank_texts(sie_url, expected):
    pytest.importorskip("llama_index.core")
    from sie_llamaindex import SIEEmbedding

    embed_model = SIEEmbedding(model=MODEL, url=sie_url)
    close(embed_model.get_text_embedding_batch(TEXTS), expected)
    close(embed_model.get_query_embedding("   "), expected[1])


def test_qdrant_upserts_blank_texts(sie_url, expected):
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient

    from sie_qdrant import SIEQdrant

    helper = SIEQdrant(dense_model=MODEL, client=SIEClient(sie_url))
    qdrant = QdrantClient(":memory:")
    helper.create_collection(qdrant, "blanks")
    helper.upsert(qdrant, "blanks", texts=TEXTS, ids=list(range(len(TEXTS))))
    points = sorted(qdrant.retrieve("blanks", ids=list(range(len(TEXTS))), with_vectors=True), key=lambda p: p.id)
    vectors = [next(iter(p.vector.values())) if isinstance(p.vector, dict) else p.vector for p in points]
    close(vectors, expected)


def test_haystack_embeds_documents_without_content(sie_url, expected):
    pytest.importorskip("haystack")
    from haystack import Document

    from sie_haystack import SIEDocumentEmbedder, SIETextEmbedder

    documents = [Document(content=None), Document(content="   "), Document(content="\n"), Document(content=TEXTS[3])]
    embedded = SIEDocumentEmbedder(model=MODEL, url=sie_url, progress_bar=False).run(documents)["documents"]
    close([d.embedding for d in embedded], expected)
    close(SIETextEmbedder(model=MODEL, url=sie_url).run("")["embedding"], expected[0])
