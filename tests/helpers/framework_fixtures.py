"""Shared pieces of the framework integration tests (LangChain, LlamaIndex, Haystack):
the tiny score and extraction models, a client that records which mode each encode
asked for, and recall@10 through SIE's own Qdrant and Chroma adapters, the baseline
each framework's retriever must match (within 1 point) on the same sample."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from integration_recall import RERANKER, recall, sample, tiny_cross_encoder
from sie_client import SIEClient

EXTRACTOR = "test/tiny-gliner"
LABELS = ["person", "organization", "location"]
CLASSIFIER = "test/tiny-nli"
CLASSES = ["software", "graphics", "games", "system administration"]
# one query of the sample's 50 (2 points): a framework's own search may rank one tie otherwise
FRAMEWORK_TOLERANCE_POINTS = 2.0


def tiny_models(tmp: Path) -> dict[str, str]:
    """A tiny random cross-encoder, GLiNER and NLI zero-shot classifier (no such weights install
    offline): the framework tests check the wiring end to end, not the quality."""
    from test_gliner_extract import build_reference
    from test_zeroshot_nli import _bert_nli

    from tiny_models import make_tiny_bert

    gliner = tmp / "gliner"
    build_reference(gliner, make_tiny_bert(tmp / "backbone", seed=5), seed=11, hidden_size=32, max_width=6)
    return {RERANKER: str(tiny_cross_encoder(tmp / "ce")), EXTRACTOR: str(gliner),
            CLASSIFIER: str(_bert_nli(tmp / "nli"))}


RELATION_MODEL = "test/tiny-glirel"
GLINER2_MODEL = "test/tiny-gliner2"


def tiny_relation_models(tmp: Path) -> dict[str, str]:
    """A tiny random GLiREL (its entity model: EXTRACTOR, the tiny GLiNER) and GLiNER2, with
    that GLiNER: the knowledge-graph extractors' wiring."""
    from test_gliner2 import build_reference as build_gliner2
    from test_gliner_deberta import tiny_deberta
    from test_glirel import VARIANTS, build_glirel

    backbone = tiny_deberta("v3", tmp / "backbone", seed=2)
    build_glirel(tmp / "glirel", backbone, 0, **VARIANTS["both-first"])
    build_gliner2(tmp / "gliner2", backbone, seed=3)
    return {RELATION_MODEL: str(tmp / "glirel"), GLINER2_MODEL: str(tmp / "gliner2"),
            EXTRACTOR: tiny_models(tmp / "framework")[EXTRACTOR]}


class ModeRecordingClient(SIEClient):
    """The real client, noting the `is_query` of each encode call: MiniLM has no query
    template, so its vectors cannot show whether an integration asked for query mode."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.modes: list[bool | None] = []

    def encode(self, model, items, **options):
        self.modes.append(options.get("is_query"))
        return super().encode(model, items, **options)


@cache
def sie_qdrant_recall(n_docs: int | None = None, sparse_model: str | None = None) -> float:
    """Recall@10 through SIEQdrant on a local-mode collection, in embedded mode: dense search,
    or with a sparse model hybrid RRF over top-10 prefetches (what LangChain's and Haystack's
    stores do). Computed once per test process: the modules comparing with it share it."""
    from qdrant_client import QdrantClient

    from sie_qdrant import SIEQdrant

    docs, queries = sample(n_docs) if n_docs else sample()
    helper = SIEQdrant(dense_model="sentence-transformers/all-MiniLM-L6-v2", sparse_model=sparse_model,
                       client=SIEClient("embedded"))
    qdrant = QdrantClient(":memory:")
    helper.create_collection(qdrant, "baseline")
    helper.upsert(qdrant, "baseline", [d["text"] for d in docs], ids=[d["id"] for d in docs])
    texts = [q["query"] for q in queries]
    if sparse_model:
        found = helper.hybrid_search_batch(qdrant, "baseline", texts, limit=10, prefetch_limit=10)
    else:
        found = helper.search_batch(qdrant, "baseline", texts, limit=10)
    return recall([[p.payload["id"] for p in points] for points in found], queries)


def sie_chroma_recall() -> float:
    """Recall@10 through sie_chroma's function on an in-memory Chroma collection (cosine), in
    embedded mode."""
    import chromadb
    from chromadb.config import Settings

    from sie_chroma import SIEEmbeddingFunction

    docs, queries = sample()
    ef = SIEEmbeddingFunction(model="sentence-transformers/all-MiniLM-L6-v2", url="embedded")
    collection = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False)).get_or_create_collection(
        "baseline", embedding_function=ef, configuration={"hnsw": {"space": "cosine"}})
    collection.add(ids=[d["id"] for d in docs], documents=[d["text"] for d in docs])
    found = collection.query(query_texts=[q["query"] for q in queries], n_results=10, include=[])["ids"]
    return recall(found, queries)


def assert_framework_recall(framework: float, baseline: float, label: str) -> None:
    assert abs(framework - baseline) <= FRAMEWORK_TOLERANCE_POINTS, \
        f"{label}: recall@10 {framework:.2f} vs SIE's own adapter {baseline:.2f}"
    assert baseline > 40.0, f"{label}: SIE's own adapter's recall@10 is only {baseline:.2f}; the vectors look wrong"
