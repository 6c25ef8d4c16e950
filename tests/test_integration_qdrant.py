"""Qdrant (local mode) with SIEQdrant: named dense and sparse (IDF) vectors, single
and hybrid queries, with SIE over a loopback server and in embedded mode. Recall@10
through Qdrant must equal brute force over the vectors Qdrant stored."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import QdrantClient, models  # noqa: E402

from integration_recall import (  # noqa: E402
    COLBERT, MODEL, RERANKER, SMALL_SAMPLE_DOCS, SPLADE, brute_force_maxsim, tiny_colbert_cards, tiny_cross_encoder, assert_recall_matches, brute_force, brute_force_sparse, idf_weights, recall, sample, sie_server,
)
from sie_client import SIEClient  # noqa: E402
from sie_qdrant import SIEQdrant, point_id  # noqa: E402


@pytest.fixture(scope="module")
def colbert_cards(tmp_path_factory):
    return tiny_colbert_cards(tmp_path_factory.mktemp("qdrant-colbert"))


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    return tiny_cross_encoder(tmp_path_factory.mktemp("qdrant-ce"))


@pytest.fixture(scope="module")
def sie_url(colbert_cards, reranker_dir):
    with sie_server("--models", str(colbert_cards), "--model", f"{RERANKER}={reranker_dir}") as url:
        yield url


@pytest.fixture(scope="module", params=["embedded", "http"])
def sie_client(request, colbert_cards, reranker_dir):
    if request.param == "embedded":
        return SIEClient("embedded", model_dirs=[str(colbert_cards)], local_models={RERANKER: str(reranker_dir)})
    return SIEClient(request.getfixturevalue("sie_url"))


def index(helper: SIEQdrant, docs: list[dict]):
    qdrant = QdrantClient(":memory:")
    helper.create_collection(qdrant, "debian")
    helper.upsert(qdrant, "debian", [d["text"] for d in docs], ids=[d["id"] for d in docs])
    stored = qdrant.retrieve("debian", ids=[point_id(d["id"]) for d in docs], with_vectors=True, with_payload=True)
    by_id = {p.payload["id"]: p for p in stored}
    assert len(by_id) == len(docs)
    return helper, qdrant, [by_id[d["id"]] for d in docs]


@pytest.fixture(scope="module")
def indexed(sie_client):
    """The sample in a local-mode collection with a named dense vector (one SIE pass per mode)."""
    return index(SIEQdrant(dense_model=MODEL, client=sie_client), sample()[0])


@pytest.fixture(scope="module")
def indexed_hybrid(sie_client):
    """The small sample with named dense + sparse (IDF) vectors."""
    return index(SIEQdrant(dense_model=MODEL, sparse_model=SPLADE, client=sie_client), sample(SMALL_SAMPLE_DOCS)[0])


def ranked_ids(points_per_query):
    return [[p.payload["id"] for p in points] for points in points_per_query]


def test_collection_config_from_models(indexed_hybrid):
    helper, qdrant, _ = indexed_hybrid
    info = qdrant.get_collection("debian").config.params
    assert info.vectors["dense"].size == 384 == helper.client.model(MODEL).dims["dense"]
    assert info.vectors["dense"].distance == models.Distance.COSINE
    assert info.sparse_vectors["sparse"].modifier == models.Modifier.IDF


def test_dense_recall(indexed, sie_client):
    helper, qdrant, stored = indexed
    docs, queries = sample()
    texts = [q["query"] for q in queries]
    through_qdrant = recall(ranked_ids(helper.search_batch(qdrant, "debian", texts, using="dense", limit=10)), queries)
    doc_vectors = np.array([p.vector["dense"] for p in stored], dtype=np.float32)
    query_vectors = np.array([v["dense"] for v in helper.embed_queries(texts)], dtype=np.float32)
    exact = recall(brute_force([d["id"] for d in docs], doc_vectors, query_vectors), queries)
    assert_recall_matches(through_qdrant, exact, f"qdrant dense ({sie_client.url})")


def test_sparse_idf_recall(indexed_hybrid, sie_client):
    helper, qdrant, stored = indexed_hybrid
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    texts = [q["query"] for q in queries]
    through_qdrant = recall(ranked_ids(helper.search_batch(qdrant, "debian", texts, using="sparse", limit=10)), queries)
    doc_vectors = [dict(zip(p.vector["sparse"].indices, p.vector["sparse"].values)) for p in stored]
    query_vectors = [dict(zip(v["sparse"].indices, v["sparse"].values)) for v in helper.embed_queries(texts)]
    exact = recall(brute_force_sparse([d["id"] for d in docs], doc_vectors, query_vectors, idf=idf_weights(doc_vectors)), queries)
    assert abs(through_qdrant - exact) <= 0.5, (through_qdrant, exact)
    # SPLADE-tiny is a 2-layer model: weaker than MiniLM, far above chance (10 / 200 docs).
    assert exact > 15.0, exact


def test_hybrid_rrf_recall(indexed_hybrid, sie_client):
    """Prefetch dense + sparse, fuse with RRF in Qdrant; brute force does the same fusion in numpy."""
    helper, qdrant, stored = indexed_hybrid
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    texts = [q["query"] for q in queries]
    hybrid = helper.hybrid_search_batch(qdrant, "debian", texts, limit=10, prefetch_limit=40)
    through_qdrant = recall(ranked_ids(hybrid), queries)
    ids = [d["id"] for d in docs]
    doc_dense = np.array([p.vector["dense"] for p in stored], dtype=np.float32)
    doc_sparse = [dict(zip(p.vector["sparse"].indices, p.vector["sparse"].values)) for p in stored]
    query_vectors = helper.embed_queries(texts)
    dense_rank = brute_force(ids, doc_dense, np.array([v["dense"] for v in query_vectors], dtype=np.float32), k=40)
    sparse_rank = brute_force_sparse(ids, doc_sparse, [dict(zip(v["sparse"].indices, v["sparse"].values)) for v in query_vectors],
                                     k=40, idf=idf_weights(doc_sparse))
    fused = []
    for dense_row, sparse_row in zip(dense_rank, sparse_rank):
        scores: dict[str, float] = {}
        for row in (dense_row, sparse_row):
            for rank, doc_id in enumerate(row):
                # Qdrant's RRF: 1 / (rank + k) with k = 2 (qdrant_client.hybrid.fusion, as the server).
                scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (rank + 2)
        fused.append(sorted(scores, key=lambda d: -scores[d])[:10])  # ties: first seen, as Qdrant's stable sort
    assert_recall_matches(through_qdrant, recall(fused, queries), f"qdrant hybrid ({sie_client.url})")


def test_multivector_max_sim_recall(sie_client):
    """A named multi-vector (MAX_SIM) from a late-interaction model: Qdrant's ranking equals
    brute-force MaxSim over the stored token vectors. (The tiny ColBERT has random weights:
    recall is compared, not judged.)"""
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    helper, qdrant, stored = index(SIEQdrant(dense_model=None, multivector_model=COLBERT, client=sie_client), docs)
    info = qdrant.get_collection("debian").config.params.vectors["multivector"]
    assert info.multivector_config.comparator == models.MultiVectorComparator.MAX_SIM and info.size == 16
    texts = [q["query"] for q in queries]
    found = helper.search_batch(qdrant, "debian", texts, limit=10)
    through_qdrant = recall(ranked_ids(found), queries)
    query_vectors = [v["multivector"] for v in helper.embed_queries(texts)]
    assert np.shape(query_vectors[0]) == (16, 16)  # expanded to the card's query length
    exact_ranked = brute_force_maxsim([d["id"] for d in docs], [p.vector["multivector"] for p in stored], query_vectors)
    assert abs(through_qdrant - recall(exact_ranked, queries)) <= 0.5
    assert sum(a[:3] == [p.payload["id"] for p in b[:3]] for a, b in zip(exact_ranked, found)) >= 0.95 * len(queries)


def test_hybrid_with_sie_rerank(indexed_hybrid, sie_client):
    """rerank=True: the fused candidates come back in the order of SIE's scores for them."""
    helper, qdrant, _ = indexed_hybrid
    reranking = SIEQdrant(dense_model=MODEL, sparse_model=SPLADE, rerank_model=RERANKER, client=sie_client)
    _, queries = sample(SMALL_SAMPLE_DOCS)
    for q in queries[:5]:
        candidates = helper.hybrid_search(qdrant, "debian", q["query"], limit=20, prefetch_limit=20)
        reranked = reranking.hybrid_search(qdrant, "debian", q["query"], limit=5, prefetch_limit=20)
        scored = sie_client.score(RERANKER, q["query"], [p.payload["text"] for p in candidates], top_k=5)
        assert [p.id for p in reranked] == [candidates[s.index].id for s in scored.scores]
        assert [p.score for p in reranked] == pytest.approx([s.score for s in scored.scores], abs=1e-6)


def test_point_ids_and_payload(indexed):
    _, _, stored = indexed
    docs, _ = sample()
    assert stored[0].payload["text"] == docs[0]["text"]
    assert point_id(7) == 7 and point_id(docs[0]["id"]) == point_id(docs[0]["id"])
    assert point_id("2f1b8a52-3c0e-4f7e-9b51-5e2d7a0c9a11") == "2f1b8a52-3c0e-4f7e-9b51-5e2d7a0c9a11"


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="at least one"):
        SIEQdrant(dense_model=None, url="http://127.0.0.1:9")
    helper = SIEQdrant(url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="rerank_model"):
        helper.rerank("q", [])
    with pytest.raises(ValueError, match="same length"):
        helper.points(["a", "b"], ids=[1])
