"""Qdrant (local mode) with SIEQdrant and AsyncSIEQdrant: named dense, sparse and
multivector vectors; single, hybrid (plain and weighted RRF) and multi-stage
queries; upsert and upload_points; with SIE over a loopback server and in embedded
mode. Recall@10 through Qdrant must equal brute force over the vectors Qdrant stored."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import AsyncQdrantClient, QdrantClient, models  # noqa: E402

from integration_recall import (  # noqa: E402
    COLBERT,
    MODEL,
    RERANKER,
    SMALL_SAMPLE_DOCS,
    SPLADE,
    assert_recall_matches,
    brute_force,
    brute_force_maxsim,
    brute_force_sparse,
    idf_weights,
    recall,
    sample,
)
from sie_client import AsyncSIEClient, SIEClient  # noqa: E402
from sie_qdrant import AsyncSIEQdrant, SIEQdrant, point_id  # noqa: E402

# The sparse, hybrid and multi-vector paths run over HTTP only: the adapter's code is the same in
# both modes, and embedded mode equals HTTP item for item (test_client.py); dense recall and the
# point layout still run in both.
HTTP_ONLY = pytest.mark.parametrize("sie_client", ["http"], indirect=True)


@pytest.fixture(scope="module", params=["embedded", "http"])
def sie_client(request, colbert_cards, reranker_dir):
    if request.param == "embedded":
        return SIEClient("embedded", model_dirs=[str(colbert_cards)], local_models={RERANKER: str(reranker_dir)})
    return SIEClient(request.getfixturevalue("sie_url"))


@pytest.fixture(scope="module")
def embedded_client(colbert_cards, reranker_dir):
    """For checks of what Qdrant does with the vectors (the same in both SIE modes): embedded only."""
    return SIEClient("embedded", model_dirs=[str(colbert_cards)], local_models={RERANKER: str(reranker_dir)})


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
    """The small sample with named dense + sparse vectors (no IDF: SPLADE weighs its terms)."""
    return index(SIEQdrant(dense_model=MODEL, sparse_model=SPLADE, client=sie_client), sample(SMALL_SAMPLE_DOCS)[0])


def ranked_ids(points_per_query):
    return [[p.payload["id"] for p in points] for points in points_per_query]


@HTTP_ONLY
def test_collection_config_from_models(indexed_hybrid):
    helper, qdrant, _ = indexed_hybrid
    info = qdrant.get_collection("debian").config.params
    assert info.vectors["dense"].size == 384 == helper.client.model(MODEL).dims["dense"]
    assert info.vectors["dense"].distance == models.Distance.COSINE
    # IDF is for BM25-style term counts; SPLADE's learned weights get none unless asked for.
    assert info.sparse_vectors["sparse"].modifier is None
    assert SIEQdrant(sparse_model=SPLADE, client=helper.client, sparse_idf=True).sparse_vectors_config()[
        "sparse"].modifier == models.Modifier.IDF


def test_dense_recall(indexed, sie_client):
    helper, qdrant, stored = indexed
    docs, queries = sample()
    texts = [q["query"] for q in queries]
    through_qdrant = recall(ranked_ids(helper.search_batch(qdrant, "debian", texts, using="dense", limit=10)), queries)
    doc_vectors = np.array([p.vector["dense"] for p in stored], dtype=np.float32)
    query_vectors = np.array([v["dense"] for v in helper.embed_queries(texts)], dtype=np.float32)
    exact = recall(brute_force([d["id"] for d in docs], doc_vectors, query_vectors), queries)
    assert_recall_matches(through_qdrant, exact, f"qdrant dense ({sie_client.url})")


def sparse_dicts(vectors):
    return [dict(zip(v.indices, v.values)) for v in vectors]


@HTTP_ONLY
def test_sparse_recall(indexed_hybrid, sie_client):
    helper, qdrant, stored = indexed_hybrid
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    texts = [q["query"] for q in queries]
    through_qdrant = recall(ranked_ids(helper.search_batch(qdrant, "debian", texts, using="sparse", limit=10)), queries)
    doc_vectors = sparse_dicts(p.vector["sparse"] for p in stored)
    query_vectors = sparse_dicts(v["sparse"] for v in helper.embed_queries(texts))
    exact = recall(brute_force_sparse([d["id"] for d in docs], doc_vectors, query_vectors), queries)
    assert abs(through_qdrant - exact) <= 0.5, (through_qdrant, exact)
    # SPLADE-tiny is a 2-layer model: weaker than MiniLM, far above chance (10 / 100 docs).
    assert exact > 15.0, exact


@HTTP_ONLY
def test_sparse_idf_on_request(indexed_hybrid, sie_client):
    """sparse_idf=True: Qdrant weighs query terms by IDF over the stored points (for vectors
    that call for it); brute force with the same IDF formula ranks the same."""
    _, _, stored = indexed_hybrid
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    helper = SIEQdrant(dense_model=None, sparse_model=SPLADE, sparse_idf=True, client=sie_client)
    qdrant = QdrantClient(":memory:")
    helper.create_collection(qdrant, "idf")
    qdrant.upsert("idf", points=[models.PointStruct(id=p.id, vector={"sparse": p.vector["sparse"]}, payload=p.payload)
                                 for p in stored])  # the vectors already encoded: only Qdrant's weighting differs
    texts = [q["query"] for q in queries]
    through_qdrant = recall(ranked_ids(helper.search_batch(qdrant, "idf", texts, limit=10)), queries)
    doc_vectors = sparse_dicts(p.vector["sparse"] for p in stored)
    query_vectors = sparse_dicts(v["sparse"] for v in helper.embed_queries(texts))
    exact = recall(brute_force_sparse([d["id"] for d in docs], doc_vectors, query_vectors,
                                      idf=idf_weights(doc_vectors)), queries)
    assert abs(through_qdrant - exact) <= 0.5, (through_qdrant, exact)


def exact_rankings(helper, stored, docs, texts, k):
    """Brute-force dense and sparse top-k per query over the stored vectors."""
    ids = [d["id"] for d in docs]
    query_vectors = helper.embed_queries(texts)
    doc_dense = np.array([p.vector["dense"] for p in stored], dtype=np.float32)
    dense_rank = brute_force(ids, doc_dense, np.array([v["dense"] for v in query_vectors], dtype=np.float32), k=k)
    sparse_rank = brute_force_sparse(ids, sparse_dicts(p.vector["sparse"] for p in stored),
                                     sparse_dicts(v["sparse"] for v in query_vectors), k=k)
    return dense_rank, sparse_rank


def rrf(rankings, weights=(1.0, 1.0), k=2):
    """Qdrant's RRF (qdrant_client.hybrid.fusion, as the server): a point at 0-based rank r of a
    list with weight w scores 1 / ((r + 1) / w + k - 1); k = 2 by default."""
    fused = []
    for rows in zip(*rankings):
        scores: dict[str, float] = {}
        for row, weight in zip(rows, weights):
            for rank, doc_id in enumerate(row):
                scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / ((rank + 1) / weight + k - 1)
        fused.append(sorted(scores, key=lambda d: -scores[d])[:10])  # ties: first seen, as Qdrant's stable sort
    return fused


@HTTP_ONLY
def test_hybrid_rrf_recall(indexed_hybrid, sie_client):
    """Prefetch dense + sparse, fuse with RRF in Qdrant; brute force does the same fusion in numpy."""
    helper, qdrant, stored = indexed_hybrid
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    texts = [q["query"] for q in queries]
    plain = ranked_ids(helper.hybrid_search_batch(qdrant, "debian", texts, limit=10, prefetch_limit=40))
    rankings = exact_rankings(helper, stored, docs, texts, k=40)
    assert_recall_matches(recall(plain, queries), recall(rrf(rankings), queries), f"qdrant hybrid ({sie_client.url})")
    # Weights per vector name and RRF's k reach Qdrant's fusion: its ranking equals numpy's
    # weighted RRF, and differs from the unweighted one.
    weighted = ranked_ids(helper.hybrid_search_batch(qdrant, "debian", texts, limit=10, prefetch_limit=40,
                                                     weights={"dense": 3.0}, rrf_k=60))
    expected = rrf(rankings, weights=(3.0, 1.0), k=60)
    assert abs(recall(weighted, queries) - recall(expected, queries)) <= 0.5
    assert sum(a[:3] == b[:3] for a, b in zip(weighted, expected)) >= 0.95 * len(queries)
    assert weighted != plain
    with pytest.raises(ValueError, match="unknown vectors"):
        helper.hybrid_search(qdrant, "debian", texts[0], weights={"colbert": 2.0})
    with pytest.raises(ValueError, match="RRF only"):
        helper.hybrid_search(qdrant, "debian", texts[0], fusion=models.Fusion.DBSF, rrf_k=10)


def test_multistage_dense_sparse_then_multivector(embedded_client):
    """Dense and sparse prefetches find candidates, the multivector rescores their union by
    MaxSim, all in one Qdrant query: the answer equals brute force doing the same stages
    (tiny random ColBERT: compared, not judged)."""
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    helper, qdrant, stored = index(
        SIEQdrant(dense_model=MODEL, sparse_model=SPLADE, multivector_model=COLBERT, client=embedded_client), docs)
    texts = [q["query"] for q in queries]
    found = ranked_ids(helper.multistage_search_batch(qdrant, "debian", texts, limit=10, prefetch_limit=20))
    assert ranked_ids([helper.multistage_search(qdrant, "debian", texts[0], limit=10, prefetch_limit=20)]) == found[:1]
    dense_rank, sparse_rank = exact_rankings(helper, stored, docs, texts, k=20)
    by_id = {d["id"]: p.vector["multivector"] for d, p in zip(docs, stored)}
    expected = []
    for query_vectors, dense_row, sparse_row in zip(helper.embed_queries(texts), dense_rank, sparse_rank):
        candidates = list(dict.fromkeys(dense_row + sparse_row))
        expected += brute_force_maxsim(candidates, [by_id[c] for c in candidates], [query_vectors["multivector"]])
    assert sum(a[:3] == b[:3] for a, b in zip(found, expected)) >= 0.95 * len(queries)
    assert abs(recall(found, queries) - recall(expected, queries)) <= 0.5
    with pytest.raises(ValueError, match="multivector_model"):
        SIEQdrant(dense_model=MODEL, client=embedded_client).multistage_search(qdrant, "debian", texts[0])


def test_upload_points_streams_encoded_points(embedded_client):
    """upload() feeds qdrant-client's upload_points from chunked SIE encodings: every point
    lands with the vectors and payload upsert() would write."""
    docs, _ = sample()
    docs = docs[:100]
    helper = SIEQdrant(dense_model=MODEL, client=embedded_client)
    qdrant = QdrantClient(":memory:")
    helper.create_collection(qdrant, "uploaded")
    texts, ids = [d["text"] for d in docs], [d["id"] for d in docs]
    assert helper.upload(qdrant, "uploaded", texts, ids=ids, chunk=32, batch_size=16) == len(docs)
    assert qdrant.count("uploaded").count == len(docs)
    stored = qdrant.retrieve("uploaded", ids=[point_id(i) for i in ids], with_vectors=True, with_payload=True)
    by_id = {p.payload["id"]: p for p in stored}
    expected = embedded_client.encode(MODEL, texts).dense_matrix()
    np.testing.assert_allclose([by_id[i].vector["dense"] for i in ids], expected, atol=2e-5)
    assert [by_id[i].payload["text"] for i in ids] == texts


@HTTP_ONLY
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


@HTTP_ONLY
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


def test_sync_helper_refuses_an_async_client():
    """With AsyncQdrantClient, SIEQdrant's calls would create coroutines nobody awaits
    (create_collection silently doing nothing): it says to use AsyncSIEQdrant."""
    helper = SIEQdrant(url="http://127.0.0.1:9")
    with pytest.raises(TypeError, match="AsyncSIEQdrant"):
        helper.create_collection(AsyncQdrantClient(":memory:"), "docs")
    with pytest.raises(TypeError, match="AsyncSIEClient"):
        AsyncSIEQdrant(client=SIEClient("http://127.0.0.1:9"))


async def test_async_client_end_to_end(sie_url):
    """AsyncSIEQdrant on AsyncQdrantClient (local mode) and AsyncSIEClient over HTTP: the
    collection is created, filled and searched; its dense and hybrid answers equal brute
    force over the vectors it stored, and the rerank orders by SIE's scores."""
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    texts = [q["query"] for q in queries]
    async with AsyncSIEClient(sie_url) as client:
        helper = AsyncSIEQdrant(dense_model=MODEL, sparse_model=SPLADE, rerank_model=RERANKER, client=client)
        qdrant = AsyncQdrantClient(":memory:")
        await helper.create_collection(qdrant, "debian")
        info = (await qdrant.get_collection("debian")).config.params
        assert info.vectors["dense"].size == 384 and info.sparse_vectors["sparse"].modifier is None
        written = await helper.upsert(qdrant, "debian", [d["text"] for d in docs], ids=[d["id"] for d in docs])
        assert written == len(docs)
        dense = await helper.search_batch(qdrant, "debian", texts, limit=10)
        hybrid = await helper.hybrid_search_batch(qdrant, "debian", texts, limit=10, prefetch_limit=40, rerank=False)
        reranked = await helper.hybrid_search(qdrant, "debian", texts[0], limit=5, prefetch_limit=20)
        stored = await qdrant.retrieve("debian", ids=[point_id(d["id"]) for d in docs], with_vectors=True,
                                       with_payload=True)
        candidates = [p.payload["text"] for p in await helper.hybrid_search(
            qdrant, "debian", texts[0], limit=20, prefetch_limit=20, rerank=False)]
    by_id = {p.payload["id"]: p for p in stored}
    stored = [by_id[d["id"]] for d in docs]
    sync = SIEQdrant(dense_model=MODEL, sparse_model=SPLADE, client=SIEClient(sie_url))
    dense_rank, sparse_rank = exact_rankings(sync, stored, docs, texts, k=40)
    assert_recall_matches(recall(ranked_ids(dense), queries), recall(dense_rank, queries), "async dense")
    assert abs(recall(ranked_ids(hybrid), queries) - recall(rrf((dense_rank, sparse_rank)), queries)) <= 0.5
    scored = SIEClient(sie_url).score(RERANKER, texts[0], candidates, top_k=5)
    assert [p.payload["text"] for p in reranked] == [candidates[s.index] for s in scored.scores]
