"""Weaviate with SIEWeaviate: the real weaviate-client v4 classes against an in-test
server speaking the REST/gRPC subset the adapter uses (tests/helpers/weaviate_test_server.py;
no Weaviate can run here), with SIE over a loopback server and in embedded mode; and
end to end against a real Weaviate when WEAVIATE_URL is set.

Recall@10 of near-vector search must equal brute force over the vectors Weaviate
returns; reranked results come back in SIE's score order; extracted entities land in
filterable properties."""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlparse

import numpy as np
import pytest

weaviate = pytest.importorskip("weaviate")
from weaviate.classes.query import Filter  # noqa: E402

from integration_recall import (  # noqa: E402
    COLBERT,
    MODEL,
    RERANKER,
    SMALL_SAMPLE_DOCS,
    assert_recall_matches,
    brute_force,
    brute_force_maxsim,
    recall,
    sample,
    sie_server,
    tiny_cross_encoder,
)
from sie_client import AsyncSIEClient, SIEClient  # noqa: E402
from sie_weaviate import AsyncSIEWeaviate, SIEWeaviate, entity_property  # noqa: E402
from weaviate_test_server import WeaviateTestServer  # noqa: E402

EXTRACTOR = "test/tiny-gliner"
LABELS = ["person", "organization", "location"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """A tiny random cross-encoder and a tiny random GLiNER (no such weights install offline)."""
    from test_gliner_extract import build_reference

    from tiny_models import make_tiny_bert

    tmp = tmp_path_factory.mktemp("weaviate-models")
    gliner = tmp / "gliner"
    build_reference(gliner, make_tiny_bert(tmp / "backbone", seed=5), seed=11, hidden_size=32, max_width=6)
    return {RERANKER: str(tiny_cross_encoder(tmp / "ce")), EXTRACTOR: str(gliner)}


@pytest.fixture(scope="module")
def sie_url(model_dirs, colbert_cards):
    args = [a for name, path in model_dirs.items() for a in ("--model", f"{name}={path}")]
    with sie_server(*args, "--models", str(colbert_cards)) as url:
        yield url


@pytest.fixture(scope="module", params=["embedded", "http"])
def sie_client(request, model_dirs, colbert_cards):
    if request.param == "embedded":
        return SIEClient("embedded", local_models=model_dirs, model_dirs=[str(colbert_cards)])
    return SIEClient(request.getfixturevalue("sie_url"))


@pytest.fixture(scope="module")
def weaviate_server():
    with WeaviateTestServer() as server:
        yield server


@pytest.fixture(scope="module")
def weaviate_client(weaviate_server):
    client = weaviate.connect_to_custom(
        http_host="127.0.0.1", http_port=weaviate_server.http_port, http_secure=False,
        grpc_host="127.0.0.1", grpc_port=weaviate_server.grpc_port, grpc_secure=False,
    )
    try:
        yield client
    finally:
        client.close()


def doc_uuid(doc_id: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, doc_id))


def index_sample(sie: SIEWeaviate, client, name: str):
    docs, _ = sample()
    if client.collections.exists(name):
        client.collections.delete(name)
    collection = sie.create_collection(client, name)
    written = sie.import_objects(collection, [{"text": d["text"], "doc_id": d["id"]} for d in docs],
                                 uuids=[doc_uuid(d["id"]) for d in docs])
    assert written == len(docs)
    return collection


def check_recall(sie: SIEWeaviate, collection, label: str):
    docs, queries = sample()
    texts = [q["query"] for q in queries]
    query_vectors = [v["dense"] for v in sie.query_vectors(texts)]
    found = [[o.properties["doc_id"]
              for o in collection.query.near_vector(near_vector=v, target_vector="dense", limit=10).objects]
             for v in query_vectors]
    through_weaviate = recall(found, queries)
    # near_text embeds the string itself (SIE's query mode): same answers as its vector.
    for text, ids in list(zip(texts, found))[:10]:
        assert [o.properties["doc_id"] for o in sie.near_text(collection, text, limit=10, rerank=False)] == ids
    stored = {}
    for obj in collection.iterator(include_vector=True, return_properties=["doc_id"]):
        stored[obj.properties["doc_id"]] = obj.vector["dense"]
    assert len(stored) == len(docs)
    doc_vectors = np.array([stored[d["id"]] for d in docs], dtype=np.float32)
    exact = recall(brute_force([d["id"] for d in docs], doc_vectors, np.array(query_vectors, dtype=np.float32)),
                   queries)
    assert_recall_matches(through_weaviate, exact, label)


@pytest.fixture(scope="module")
def indexed(sie_client, weaviate_client):
    sie = SIEWeaviate(dense_model=MODEL, rerank_model=RERANKER, extract_model=EXTRACTOR, client=sie_client)
    name = "Debian_" + ("embedded" if sie_client.embedded else "http")
    return sie, index_sample(sie, weaviate_client, name)


def test_near_vector_recall(indexed, sie_client):
    sie, collection = indexed
    check_recall(sie, collection, f"weaviate near-vector ({sie_client.url})")


def test_collection_has_self_provided_named_vector(indexed):
    _, collection = indexed
    config = collection.config.get(simple=True)
    assert set(config.vector_config) == {"dense"}
    assert config.vector_config["dense"].vectorizer.vectorizer == "none"  # self-provided


def test_hybrid_alpha_ends(indexed):
    """alpha=1 is pure vector search (the near-vector order); alpha=0 pure BM25, whatever the vector."""
    sie, collection = indexed
    _, queries = sample()
    for q in queries[:5]:
        vector_ids = [o.uuid for o in sie.near_text(collection, q["query"], limit=10, rerank=False)]
        assert [o.uuid for o in sie.hybrid(collection, q["query"], alpha=1.0, limit=10, rerank=False)] == vector_ids
        keyword = sie.hybrid(collection, q["query"], alpha=0.0, limit=10, rerank=False)
        scores = [o.metadata.score for o in keyword]
        assert scores == sorted(scores, reverse=True)


def test_rerank_follows_sie_scores(indexed, sie_client):
    sie, collection = indexed
    _, queries = sample()
    for q in queries[:8]:
        candidates = sie.near_text(collection, q["query"], limit=20, rerank=False)
        reranked = sie.near_text(collection, q["query"], limit=10, rerank=True, candidates=20)
        scored = sie_client.score(RERANKER, q["query"], [o.properties["text"] for o in candidates], top_k=10)
        assert [o.uuid for o in reranked] == [candidates[s.index].uuid for s in scored.scores]
        assert [o.metadata.rerank_score for o in reranked] == pytest.approx([s.score for s in scored.scores], abs=1e-6)
        hybrid = sie.hybrid(collection, q["query"], limit=5, rerank=True, candidates=20)
        hybrid_scores = [o.metadata.rerank_score for o in hybrid]
        assert hybrid_scores == sorted(hybrid_scores, reverse=True)


# over HTTP only: the helper's code is the same in both modes, and embedded mode equals HTTP item
# for item (test_client.py); dense recall and reranking run in both
@pytest.mark.parametrize("sie_client", ["http"], indirect=True)
def test_multivector_near_text_ranks_by_maxsim(sie_client, weaviate_client):
    """A self-provided multi-vector from a late-interaction model: near-vector search ranks as
    brute-force MaxSim over the token vectors Weaviate returns (tiny random ColBERT)."""
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    sie = SIEWeaviate(dense_model=None, multivector_model=COLBERT, client=sie_client)
    name = "Tokens_" + ("embedded" if sie_client.embedded else "http")
    collection = sie.create_collection(weaviate_client, name)
    sie.import_objects(collection, [{"text": d["text"], "doc_id": d["id"]} for d in docs],
                       uuids=[doc_uuid(d["id"]) for d in docs])
    assert collection.config.get(simple=True).vector_config["multivector"].vector_index_config.multi_vector is not None
    texts = [q["query"] for q in queries]
    query_vectors = [v["multivector"] for v in sie.query_vectors(texts)]
    found = [[o.properties["doc_id"]
              for o in collection.query.near_vector(near_vector=v, target_vector="multivector", limit=10).objects]
             for v in query_vectors]
    assert [o.properties["doc_id"] for o in sie.near_text(collection, texts[0], limit=10)] == found[0]
    stored = {o.properties["doc_id"]: o.vector["multivector"] for o in collection.iterator(include_vector=True)}
    exact = brute_force_maxsim([d["id"] for d in docs], [stored[d["id"]] for d in docs], query_vectors)
    assert abs(recall(found, queries) - recall(exact, queries)) <= 0.5


def test_enrichment_into_filterable_properties(sie_client, weaviate_client):
    docs, _ = sample()
    texts = [d["text"] for d in docs[:40]]
    sie = SIEWeaviate(dense_model=MODEL, extract_model=EXTRACTOR, client=sie_client)
    name = "Enriched_" + ("embedded" if sie_client.embedded else "http")
    collection = sie.create_collection(weaviate_client, name, entity_labels=LABELS)
    sie.import_objects(collection, [{"text": t} for t in texts], uuids=[doc_uuid(t) for t in texts],
                       entity_labels=LABELS)
    expected = sie.enrich(texts, LABELS)
    assert any(props[entity_property(label)] for props in expected for label in LABELS), "no entities to filter on"
    extracted = sie_client.extract(EXTRACTOR, texts, LABELS)
    for props, item in zip(expected, extracted.items):
        for label in LABELS:
            found_texts = [e.text for e in item.entities if e.label == label]
            assert props[entity_property(label)] == list(dict.fromkeys(found_texts))
    # Every object carries every entity property (possibly empty), and filters select on them.
    label = next(label for label in LABELS if any(p[entity_property(label)] for p in expected))
    value = next(p[entity_property(label)][0] for p in expected if p[entity_property(label)])
    hits = collection.query.fetch_objects(filters=Filter.by_property(entity_property(label)).contains_any([value]),
                                          limit=100)
    want = {doc_uuid(t) for t, p in zip(texts, expected) if value in p[entity_property(label)]}
    assert {str(o.uuid) for o in hits.objects} == want


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="dense_model, multivector_model"):
        SIEWeaviate(dense_model=None, url="http://127.0.0.1:9")
    sie = SIEWeaviate(url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="extract_model"):
        sie.enrich(["x"], ["person"])
    with pytest.raises(ValueError, match="rerank_model"):
        sie.rerank("q", [])
    assert entity_property("Programming Language") == "entities_programming_language"


def test_a_plain_string_is_one_text(indexed):
    """query_vectors / document_vectors / enrich take one string as one text (a str is a
    sequence too: iterating it would encode each character)."""
    sie, _ = indexed
    assert sie.query_vectors("install a package") == sie.query_vectors(["install a package"])
    assert len(sie.document_vectors("apt installs Debian packages")) == 1
    assert len(sie.enrich("Ada Lovelace lived in London", LABELS)) == 1


def test_sync_helper_refuses_the_async_client(weaviate_server):
    client = weaviate.use_async_with_custom(
        http_host="127.0.0.1", http_port=weaviate_server.http_port, http_secure=False,
        grpc_host="127.0.0.1", grpc_port=weaviate_server.grpc_port, grpc_secure=False)
    with pytest.raises(TypeError, match="AsyncSIEWeaviate"):
        SIEWeaviate(url="http://127.0.0.1:9").create_collection(client, "Docs")
    with pytest.raises(TypeError, match="AsyncSIEClient"):
        AsyncSIEWeaviate(client=SIEClient("http://127.0.0.1:9"))


async def test_async_client_end_to_end(weaviate_server, sie_url):
    """AsyncSIEWeaviate on Weaviate's async client and AsyncSIEClient over HTTP: create,
    import (with entities), near-text recall equal to brute force over the stored vectors,
    hybrid, and a rerank in SIE's score order."""
    docs, queries = sample()
    sie_client = SIEClient(sie_url)
    async with AsyncSIEClient(sie_url) as client:
        sie = AsyncSIEWeaviate(dense_model=MODEL, rerank_model=RERANKER, extract_model=EXTRACTOR, client=client)
        async with weaviate.use_async_with_custom(
                http_host="127.0.0.1", http_port=weaviate_server.http_port, http_secure=False,
                grpc_host="127.0.0.1", grpc_port=weaviate_server.grpc_port, grpc_secure=False) as wclient:
            for name in ("DebianAsync", "EnrichedAsync"):
                if await wclient.collections.exists(name):
                    await wclient.collections.delete(name)
            collection = await sie.create_collection(wclient, "DebianAsync")
            objects = [{"text": d["text"], "doc_id": d["id"]} for d in docs]
            written = await sie.import_objects(collection, objects, uuids=[doc_uuid(d["id"]) for d in docs],
                                               chunk=256)
            assert written == len(docs)
            enriched = await sie.create_collection(wclient, "EnrichedAsync", entity_labels=LABELS)
            await sie.import_objects(enriched, objects[:20], entity_labels=LABELS)
            properties = [o.properties async for o in enriched.iterator()]
            texts = [q["query"] for q in queries]
            found = [[o.properties["doc_id"] for o in await sie.near_text(collection, t, limit=10, rerank=False)]
                     for t in texts]
            stored = {}
            async for obj in collection.iterator(include_vector=True):
                stored[obj.properties["doc_id"]] = obj.vector["dense"]
            keyword = await sie.hybrid(collection, texts[0], alpha=0.0, limit=5, rerank=False)
            candidates = await sie.near_text(collection, texts[0], limit=20, rerank=False)
            reranked = await sie.near_text(collection, texts[0], limit=5, candidates=20)
    assert len(properties) == 20 and all(entity_property(label) in props for props in properties for label in LABELS)
    expected = sie_client.extract(EXTRACTOR, [o["text"] for o in objects[:20]], LABELS)
    by_text = {props["text"]: props for props in properties}
    for obj, item in zip(objects[:20], expected.items):
        for label in LABELS:
            found_texts = [e.text for e in item.entities if e.label == label]
            assert by_text[obj["text"]][entity_property(label)] == list(dict.fromkeys(found_texts))
    query_vectors = sie_client.encode(MODEL, texts, is_query=True).dense_matrix()
    doc_vectors = np.array([stored[d["id"]] for d in docs], dtype=np.float32)
    exact = recall(brute_force([d["id"] for d in docs], doc_vectors, query_vectors), queries)
    assert_recall_matches(recall(found, queries), exact, "weaviate async near-vector")
    assert [o.metadata.score for o in keyword] == sorted([o.metadata.score for o in keyword], reverse=True)
    scored = sie_client.score(RERANKER, texts[0], [o.properties["text"] for o in candidates], top_k=5)
    assert [o.uuid for o in reranked] == [candidates[s.index].uuid for s in scored.scores]


@pytest.mark.skipif(not os.environ.get("WEAVIATE_URL"),
                    reason="needs a real Weaviate (set WEAVIATE_URL, and WEAVIATE_GRPC_PORT if not 50051); "
                           "none can run on this machine")
def test_real_weaviate_end_to_end():
    url = urlparse(os.environ["WEAVIATE_URL"])
    client = weaviate.connect_to_custom(
        http_host=url.hostname, http_port=url.port or (443 if url.scheme == "https" else 80),
        http_secure=url.scheme == "https", grpc_host=url.hostname,
        grpc_port=int(os.environ.get("WEAVIATE_GRPC_PORT", "50051")), grpc_secure=url.scheme == "https",
    )
    try:
        sie = SIEWeaviate(dense_model=MODEL, client=SIEClient(os.environ.get("SIE_URL") or "embedded"))
        collection = index_sample(sie, client, "SieEndToEnd")
        check_recall(sie, collection, "real weaviate")
        client.collections.delete("SieEndToEnd")
    finally:
        client.close()
