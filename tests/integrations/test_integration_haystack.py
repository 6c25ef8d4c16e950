"""Haystack with sie_haystack, on the real haystack-ai and qdrant-haystack: an indexing
pipeline (SIEDocumentEmbedder -> DocumentWriter into QdrantDocumentStore, local mode)
and a query pipeline (SIETextEmbedder -> QdrantEmbeddingRetriever) must retrieve with
the recall@10 of SIE's own Qdrant adapter (within 1 point); the ranker and the entity
extractor must hand back SIE's own answers (tiny random models: wiring, not quality);
run_async equals run; pipelines serialise and load back. SIE runs as a server here:
Haystack components take a URL, not a client."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

pytest.importorskip("haystack")
pytest.importorskip("haystack_integrations.document_stores.qdrant")
import haystack  # noqa: E402
from haystack import Document, Pipeline  # noqa: E402
from haystack.components.writers import DocumentWriter  # noqa: E402
from haystack.utils import Secret  # noqa: E402
from haystack_integrations.components.retrievers.qdrant import QdrantEmbeddingRetriever  # noqa: E402
from haystack_integrations.document_stores.qdrant import QdrantDocumentStore  # noqa: E402

from framework_fixtures import (  # noqa: E402
    EXTRACTOR,
    GLINER2_MODEL,
    LABELS,
    RELATION_MODEL,
    assert_framework_recall,
    sie_qdrant_recall,
    tiny_models,
    tiny_relation_models,
)
from integration_recall import MODEL, RERANKER, recall, sample, sie_server  # noqa: E402
from sie_client import SIEClient  # noqa: E402
from sie_haystack import SIEDocumentEmbedder, SIEEntityExtractor, SIERanker, SIETextEmbedder  # noqa: E402


@pytest.fixture(scope="module")
def sie_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("haystack-models")
    models = {**tiny_models(tmp), **tiny_relation_models(tmp / "relations")}
    with sie_server(*[arg for name, path in models.items() for arg in ("--model", f"{name}={path}")]) as url:
        yield url


def document_store() -> QdrantDocumentStore:
    return QdrantDocumentStore(":memory:", embedding_dim=384, similarity="cosine", recreate_index=True,
                               progress_bar=False)


# haystack 2.x runs pipelines asynchronously with AsyncPipeline; 3.x's Pipeline has run_async.
ASYNC_PIPELINE = getattr(haystack, "AsyncPipeline", Pipeline)
# haystack 3.x loads classes only from modules the caller trusts; 2.x has no such argument.
TRUST = {"allowed_modules": ["sie_haystack"]} if "allowed_modules" in inspect.signature(Pipeline.loads).parameters \
    else {}


def query_pipeline(sie_url: str, store: QdrantDocumentStore, pipeline_class=Pipeline):
    pipeline = pipeline_class()
    pipeline.add_component("embedder", SIETextEmbedder(model=MODEL, url=sie_url))
    pipeline.add_component("retriever", QdrantEmbeddingRetriever(document_store=store, top_k=10))
    pipeline.connect("embedder.embedding", "retriever.query_embedding")
    return pipeline


def test_pipelines_recall_equals_sie_qdrant(sie_url):
    docs, queries = sample()
    store = document_store()
    indexing = Pipeline()
    indexing.add_component("embedder", SIEDocumentEmbedder(model=MODEL, url=sie_url, progress_bar=False))
    indexing.add_component("writer", DocumentWriter(document_store=store))
    indexing.connect("embedder.documents", "writer.documents")
    written = indexing.run({"embedder": {"documents": [Document(id=d["id"], content=d["text"]) for d in docs]}})
    assert written["writer"]["documents_written"] == len(docs)
    pipeline = query_pipeline(sie_url, store)
    found = [[d.id for d in pipeline.run({"embedder": {"text": q["query"]}})["retriever"]["documents"]]
             for q in queries]
    assert_framework_recall(recall(found, queries), sie_qdrant_recall(), "haystack QdrantDocumentStore")


async def test_run_async_equals_run(sie_url):
    docs, queries = sample()
    documents = [Document(id=d["id"], content=d["text"], meta={"section": "x"}) for d in docs[:20]]
    embedder = SIEDocumentEmbedder(model=MODEL, url=sie_url, progress_bar=False, meta_fields_to_embed=["section"])
    sync_docs, async_docs = embedder.run(documents)["documents"], (await embedder.run_async(documents))["documents"]
    np.testing.assert_allclose([d.embedding for d in async_docs], [d.embedding for d in sync_docs], atol=2e-5)
    expected = SIEClient(sie_url).encode(MODEL, ["x\n" + d.content for d in documents]).dense_matrix()
    np.testing.assert_allclose([d.embedding for d in sync_docs], expected, atol=2e-5)
    text_embedder = SIETextEmbedder(model=MODEL, url=sie_url)
    one = text_embedder.run(queries[0]["query"])
    np.testing.assert_allclose((await text_embedder.run_async(queries[0]["query"]))["embedding"], one["embedding"],
                               atol=2e-5)
    assert one["meta"]["model"] == MODEL and one["meta"]["usage"]["tokens"] > 0
    store = document_store()
    await store.write_documents_async(sync_docs)  # local mode: the async client has its own in-memory data
    pipeline = query_pipeline(sie_url, store, ASYNC_PIPELINE)
    answer = await pipeline.run_async({"embedder": {"text": queries[0]["query"]}})
    assert len(answer["retriever"]["documents"]) == 10
    with pytest.raises(TypeError, match="SIEDocumentEmbedder"):
        text_embedder.run(["a", "list"])


async def test_ranker_orders_by_sie_scores(sie_url):
    docs, queries = sample()
    documents = [Document(id=d["id"], content=d["text"]) for d in docs[:20]]
    ranker = SIERanker(model=RERANKER, url=sie_url, top_k=5)
    client = SIEClient(sie_url)
    for q in queries[:3]:
        scored = client.score(RERANKER, q["query"], [d.content for d in documents], top_k=5)
        ranked = ranker.run(query=q["query"], documents=documents)["documents"]
        assert [d.id for d in ranked] == [documents[s.index].id for s in scored.scores]
        assert [d.score for d in ranked] == pytest.approx([s.score for s in scored.scores], abs=1e-6)
        again = (await ranker.run_async(query=q["query"], documents=documents))["documents"]
        assert [d.id for d in again] == [d.id for d in ranked]
    assert len(ranker.run(query="x", documents=documents, top_k=2)["documents"]) == 2
    assert SIERanker.from_dict(ranker.to_dict()).to_dict() == ranker.to_dict()


async def test_entity_extractor_annotates_documents(sie_url):
    texts = ["Ada Lovelace worked with Charles Babbage in London.", *[d["text"] for d in sample()[0][:15]]]
    documents = [Document(id=str(i), content=t) for i, t in enumerate(texts)]
    extractor = SIEEntityExtractor(labels=LABELS, model=EXTRACTOR, url=sie_url)
    annotated = extractor.run(documents)["documents"]
    expected = SIEClient(sie_url).extract(EXTRACTOR, texts, LABELS)
    assert any(item.entities for item in expected.items), "the tiny GLiNER found nothing to compare"
    for doc, item in zip(annotated, expected.items):
        assert sorted((a["start"], a["end"], a["entity"]) for a in doc.meta["named_entities"]) == \
            sorted((e.start, e.end, e.label) for e in item.entities)
        assert all(doc.content[a["start"]:a["end"]] == a["text"] for a in doc.meta["named_entities"])
    assert [d.meta for d in (await extractor.run_async(documents))["documents"]] == [d.meta for d in annotated]
    # The annotations are JSON: a document store keeps them.
    store = document_store()
    store.write_documents(annotated)
    stored = {d.id: d.meta for d in store.filter_documents()}
    assert all(stored[d.id]["named_entities"] == d.meta["named_entities"] for d in annotated)


async def test_entity_extractor_annotates_relations(sie_url):
    """A GLiNER2 model (relation_labels) and a GLiREL model with a GLiNER entity_model: triples
    under meta["relations"], JSON a document store keeps; the settings survive to_dict."""
    from test_gliner2 import LABELS as TYPES
    from test_gliner2 import RELATIONS as GLINER2_RELATIONS
    from test_gliner2 import TEXTS
    from test_glirel import RELATIONS

    documents = [Document(id=str(i), content=t) for i, t in enumerate(TEXTS)]
    client = SIEClient(sie_url)
    for extractor, expected in [
        (SIEEntityExtractor(labels=TYPES, model=GLINER2_MODEL, url=sie_url, relation_labels=GLINER2_RELATIONS,
                            threshold=0.0),
         client.extract(GLINER2_MODEL, TEXTS, TYPES, relation_labels=GLINER2_RELATIONS, threshold=0.0)),
        (SIEEntityExtractor(labels=RELATIONS, model=RELATION_MODEL, url=sie_url, entity_model=EXTRACTOR,
                            entity_labels=LABELS, threshold=0.0),
         client.extract(RELATION_MODEL, TEXTS, RELATIONS, entity_model=EXTRACTOR, entity_labels=LABELS,
                        threshold=0.0)),
    ]:
        annotated = extractor.run(documents)["documents"]
        assert sum(len(item.relations) for item in expected.items) > 0
        for doc, item in zip(annotated, expected.items):
            assert [(r["head"]["start"], r["relation"], r["tail"]["end"], r["head"]["entity"])
                    for r in doc.meta["relations"]] == \
                [(r.head.start, r.relation, r.tail.end, r.head.label) for r in item.relations]
        assert [d.meta for d in (await extractor.run_async(documents))["documents"]] == [d.meta for d in annotated]
        store = document_store()
        store.write_documents(annotated)
        assert {d.id: d.meta["relations"] for d in store.filter_documents()} == \
            {d.id: d.meta["relations"] for d in annotated}
        again = SIEEntityExtractor.from_dict(extractor.to_dict())
        assert (again.relation_labels, again.entity_model, again.entity_labels) == \
            (extractor.relation_labels, extractor.entity_model, extractor.entity_labels)
    client.close()


def test_components_serialise_without_the_key(monkeypatch):
    monkeypatch.setenv("SIE_API_KEY", "k-123")
    # A pipeline through YAML and back, as a deployed one is loaded (Haystack loads classes
    # only from modules the caller trusts).
    pipeline = query_pipeline("http://127.0.0.1:9", document_store())
    loaded = Pipeline.loads(pipeline.dumps(), **TRUST)
    assert loaded.get_component("embedder").to_dict() == pipeline.get_component("embedder").to_dict()
    assert "k-123" not in pipeline.dumps()
    extractor = SIEEntityExtractor(labels=LABELS, url="http://127.0.0.1:9")
    data = extractor.to_dict()
    assert "k-123" not in str(data) and data["init_parameters"]["api_key"]["env_vars"] == ["SIE_API_KEY"]
    assert SIEEntityExtractor.from_dict(data).clients.sync.api_key == "k-123"
    with pytest.raises(ValueError, match="serialize"):
        SIETextEmbedder(url="http://127.0.0.1:9", api_key=Secret.from_token("k-456")).to_dict()
