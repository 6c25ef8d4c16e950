"""LangChain with sie_langchain, on the real langchain-core and langchain-qdrant:
retrieval through QdrantVectorStore (local mode) with SIEEmbeddings, dense and hybrid
with SIESparseEmbeddings, must reach the recall@10 of SIE's own Qdrant adapter (within
1 point); the reranker and the entity extractor must hand back SIE's own answers
(tiny random models: wiring, not quality); async variants must equal the sync ones."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_qdrant")
from langchain_core.documents import Document  # noqa: E402
from langchain_qdrant import QdrantVectorStore, RetrievalMode  # noqa: E402

from framework_fixtures import (  # noqa: E402
    CLASSES,
    CLASSIFIER,
    EXTRACTOR,
    LABELS,
    ModeRecordingClient,
    assert_framework_recall,
    sie_qdrant_recall,
    tiny_models,
)
from integration_recall import MODEL, RERANKER, SMALL_SAMPLE_DOCS, SPLADE, recall, sample  # noqa: E402
from sie_client import AsyncSIEClient  # noqa: E402
from sie_langchain import SIEEmbeddings, SIEEntityExtractor, SIEReranker  # noqa: E402
from sie_langchain.sparse import SIESparseEmbeddings  # noqa: E402
from sie_qdrant import point_id  # noqa: E402


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    """One embedded engine for the module (MiniLM, SPLADE-tiny and the tiny models), behind a
    sync client that records query modes and an async client."""
    models = tiny_models(tmp_path_factory.mktemp("langchain-models"))
    return ModeRecordingClient("embedded", local_models=models), AsyncSIEClient("embedded", local_models=models)


def store_of(docs, embeddings, **options) -> QdrantVectorStore:
    return QdrantVectorStore.from_texts(
        [d["text"] for d in docs], embeddings, metadatas=[{"doc_id": d["id"]} for d in docs],
        ids=[point_id(d["id"]) for d in docs], location=":memory:", collection_name="debian", batch_size=256,
        **options)


def test_dense_retrieval_recall_equals_sie_qdrant(clients):
    sync, async_client = clients
    docs, queries = sample()
    embeddings = SIEEmbeddings(model=MODEL, client=sync, async_client=async_client)
    sync.modes.clear()
    store = store_of(docs, embeddings)
    assert set(sync.modes) == {False}  # documents in document mode
    retriever = store.as_retriever(search_kwargs={"k": 10})
    sync.modes.clear()
    found = [[d.metadata["doc_id"] for d in retriever.invoke(q["query"])] for q in queries]
    assert set(sync.modes) == {True}  # queries in query mode
    assert_framework_recall(recall(found, queries), sie_qdrant_recall(), "langchain QdrantVectorStore")


def test_hybrid_retrieval_recall_equals_sie_qdrant(clients):
    """RetrievalMode.HYBRID with SIESparseEmbeddings: dense + sparse prefetches fused by RRF."""
    sync, async_client = clients
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    store = store_of(docs, SIEEmbeddings(model=MODEL, client=sync),
                     sparse_embedding=SIESparseEmbeddings(model=SPLADE, client=sync),
                     retrieval_mode=RetrievalMode.HYBRID)
    found = [[d.metadata["doc_id"] for d in store.similarity_search(q["query"], k=10)] for q in queries]
    assert_framework_recall(recall(found, queries), sie_qdrant_recall(SMALL_SAMPLE_DOCS, sparse_model=SPLADE),
                            "langchain hybrid")


async def test_async_methods_equal_sync(clients):
    sync, async_client = clients
    texts = [d["text"] for d in sample()[0][:20]]
    for embeddings in (SIEEmbeddings(model=MODEL, client=sync, async_client=async_client),
                       SIEEmbeddings(model=MODEL, client=sync)):  # no async client: the sync one in a thread
        np.testing.assert_allclose(await embeddings.aembed_documents(texts), embeddings.embed_documents(texts),
                                   atol=2e-5)
        np.testing.assert_allclose(await embeddings.aembed_query(texts[0]), embeddings.embed_query(texts[0]),
                                   atol=2e-5)
    sparse = SIESparseEmbeddings(model=SPLADE, client=sync, async_client=async_client)
    got, expected = await sparse.aembed_query(texts[0]), sparse.embed_query(texts[0])
    assert got.indices == expected.indices and got.values == pytest.approx(expected.values, abs=1e-5)
    assert len(await sparse.aembed_documents(texts)) == len(texts)


async def test_reranker_orders_by_sie_scores(clients):
    sync, async_client = clients
    docs, queries = sample()
    candidates = [Document(page_content=d["text"], metadata={"doc_id": d["id"]}, id=d["id"]) for d in docs[:20]]
    reranker = SIEReranker(model=RERANKER, top_n=5, client=sync, async_client=async_client)
    for q in queries[:3]:
        scored = sync.score(RERANKER, q["query"], [d.page_content for d in candidates], top_k=5)
        reranked = reranker.compress_documents(candidates, q["query"])
        assert [d.id for d in reranked] == [candidates[s.index].id for s in scored.scores]
        assert [d.metadata["relevance_score"] for d in reranked] == pytest.approx([s.score for s in scored.scores],
                                                                                   abs=1e-6)
        assert [d.id for d in await reranker.acompress_documents(candidates, q["query"])] == [d.id for d in reranked]
    assert "relevance_score" not in candidates[0].metadata  # the inputs are left as they were
    assert reranker.compress_documents([], "anything") == []


async def test_entity_extractor_tags_documents(clients):
    sync, async_client = clients
    texts = ["Ada Lovelace worked with Charles Babbage in London.", *[d["text"] for d in sample()[0][:15]]]
    documents = [Document(page_content=t, metadata={"n": i}) for i, t in enumerate(texts)]
    extractor = SIEEntityExtractor(model=EXTRACTOR, labels=LABELS, client=sync, async_client=async_client)
    tagged = extractor.transform_documents(documents)
    expected = sync.extract(EXTRACTOR, texts, LABELS)
    assert any(item.entities for item in expected.items), "the tiny GLiNER found nothing to compare"
    for doc, item in zip(tagged, expected.items):
        assert doc.metadata["n"] == texts.index(doc.page_content)
        assert sorted((e["start"], e["end"], e["label"]) for e in doc.metadata["entities"]) == \
            sorted((e.start, e.end, e.label) for e in item.entities)
        assert all(doc.page_content[e["start"]:e["end"]] == e["text"] for e in doc.metadata["entities"])
    assert [d.metadata for d in await extractor.atransform_documents(documents)] == [d.metadata for d in tagged]


async def test_the_extractor_tags_classes_with_a_classification_model(clients):
    sync, async_client = clients
    texts = [d["text"] for d in sample()[0][:6]]
    documents = [Document(page_content=t) for t in texts]
    tagger = SIEEntityExtractor(model=CLASSIFIER, labels=CLASSES, top_k=2, client=sync, async_client=async_client)
    tagged = tagger.transform_documents(documents)
    expected = sync.extract(CLASSIFIER, texts, CLASSES, top_k=2)
    for doc, item in zip(tagged, expected.items):
        assert "entities" not in doc.metadata
        assert doc.metadata["classifications"] == [{"label": c.label, "score": c.score} for c in item.classifications]
        assert len(doc.metadata["classifications"]) == 2
    assert [d.metadata for d in await tagger.atransform_documents(documents)] == [d.metadata for d in tagged]


async def test_the_extractor_tags_relations_from_gliner2_and_a_relation_model(tmp_path_factory):
    """Relation triples under metadata["relations"]: a GLiNER2 model (entity types in labels,
    relation types in relation_labels) and a GLiREL model whose GLiNER entity model finds the
    entities first; entities tagged beside them; async equal to sync."""
    from test_gliner2 import LABELS as TYPES
    from test_gliner2 import RELATIONS as GLINER2_RELATIONS
    from test_gliner2 import TEXTS
    from test_glirel import RELATIONS

    from framework_fixtures import GLINER2_MODEL, RELATION_MODEL, tiny_relation_models
    from sie_client import AsyncSIEClient, SIEClient

    local = tiny_relation_models(tmp_path_factory.mktemp("langchain-relations"))
    with SIEClient("embedded", local_models=local) as sync:
        async_client = AsyncSIEClient("embedded", local_models=local)
        documents = [Document(page_content=t) for t in TEXTS]
        for tagger, expected in [
            (SIEEntityExtractor(model=GLINER2_MODEL, labels=TYPES, relation_labels=GLINER2_RELATIONS, threshold=0.0,
                                client=sync, async_client=async_client),
             sync.extract(GLINER2_MODEL, TEXTS, TYPES, relation_labels=GLINER2_RELATIONS, threshold=0.0)),
            (SIEEntityExtractor(model=RELATION_MODEL, labels=RELATIONS, entity_model=EXTRACTOR, entity_labels=LABELS,
                                threshold=0.0, client=sync, async_client=async_client),
             sync.extract(RELATION_MODEL, TEXTS, RELATIONS, entity_model=EXTRACTOR, entity_labels=LABELS,
                          threshold=0.0)),
        ]:
            tagged = tagger.transform_documents(documents)
            assert sum(len(item.relations) for item in expected.items) > 0
            for doc, item in zip(tagged, expected.items):
                assert [(r["head"]["start"], r["relation"], r["tail"]["end"], r["score"])
                        for r in doc.metadata["relations"]] == \
                    [(r.head.start, r.relation, r.tail.end, r.score) for r in item.relations]
                assert all(doc.page_content[r["head"]["start"]:r["head"]["end"]].strip() == r["head"]["text"]
                           for r in doc.metadata["relations"])
                assert sorted((e["start"], e["label"]) for e in doc.metadata["entities"]) == \
                    sorted((e.start, e.label) for e in item.entities)
            assert [d.metadata for d in await tagger.atransform_documents(documents)] == [d.metadata for d in tagged]
        await async_client.close()
