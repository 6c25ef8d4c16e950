"""Haystack with sie_haystack, on the real haystack-ai and qdrant-haystack: an indexing
pipeline (SIEDocumentEmbedder -> DocumentWriter into QdrantDocumentStore, local mode)
and a query pipeline (SIETextEmbedder -> QdrantEmbeddingRetriever) must retrieve with
the recall@10 of SIE's own Qdrant adapter (within 1 point); the ranker and the entity
extractor must hand back SIE's own answers (tiny random models: wiring, not quality);
run_async equals run; pipelines serialise and load back. SIE runs as a server here:
Haystack components take a URL, not a client."""

from __future__ import annotations

import copy
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
    assert SIEEntityExtractor.from_dict(data).sync_client.api_key == "k-123"
    with pytest.raises(ValueError, match="serialize"):
        SIETextEmbedder(url="http://127.0.0.1:9", api_key=Secret.from_token("k-456")).to_dict()


# ---- the conventions of Haystack's own OpenAI embedders (issue 29.7) -------------------------

def test_prefix_suffix_and_dimensions(sie_url):
    """prefix / suffix go around each text (and after the meta fields), dimensions truncates as
    SIE's `dims`; `dims=` still works, with a DeprecationWarning."""
    client = SIEClient(sie_url)
    text = SIETextEmbedder(model=MODEL, url=sie_url, prefix="query: ", suffix=" ?", dimensions=128)
    vector = text.run("mount a USB disk")["embedding"]
    expected = client.encode(MODEL, ["query: mount a USB disk ?"], is_query=True, dims=128).dense_matrix()[0]
    assert len(vector) == 128
    np.testing.assert_allclose(vector, expected, atol=2e-5)
    documents = [Document(id="1", content="udisks mounts disks", meta={"section": "admin"})]
    embedder = SIEDocumentEmbedder(model=MODEL, url=sie_url, progress_bar=False, prefix="passage: ", suffix="!",
                                   meta_fields_to_embed=["section"], dimensions=64)
    embedded = embedder.run(documents)["documents"][0].embedding
    expected = client.encode(MODEL, ["passage: admin\nudisks mounts disks!"], dims=64).dense_matrix()[0]
    np.testing.assert_allclose(embedded, expected, atol=2e-5)
    with pytest.warns(DeprecationWarning, match="dimensions"):
        old = SIETextEmbedder(model=MODEL, url=sie_url, dims=128)
    assert old.dimensions == 128 and old.to_dict()["init_parameters"]["dimensions"] == 128
    client.close()


def test_settings_serialise_and_load_back():
    for component in (
        SIETextEmbedder(url="http://127.0.0.1:9", dimensions=64, prefix="q: ", suffix="?", timeout=5.0,
                        max_retries=1),
        SIEDocumentEmbedder(url="http://127.0.0.1:9", dimensions=64, prefix="p: ", suffix="!", timeout=5.0,
                            max_retries=0, raise_on_failure=True),
        SIERanker(url="http://127.0.0.1:9", max_retries=2),
        SIEEntityExtractor(labels=LABELS, url="http://127.0.0.1:9", max_retries=3),
    ):
        data = component.to_dict()
        assert type(component).from_dict(copy.deepcopy(data)).to_dict() == data  # from_dict edits its argument
        assert data["init_parameters"]["max_retries"] == component.max_retries
    params = SIEDocumentEmbedder(dimensions=64, prefix="p: ", raise_on_failure=True).to_dict()["init_parameters"]
    assert (params["dimensions"], params["prefix"], params["suffix"], params["raise_on_failure"]) == \
        (64, "p: ", "", True)
    # A pipeline saved before the rename (`dims`) still loads.
    old = SIETextEmbedder().to_dict()
    old["init_parameters"]["dims"] = old["init_parameters"].pop("dimensions") or 32
    with pytest.warns(DeprecationWarning):
        assert SIETextEmbedder.from_dict(old).dimensions == 32
    with pytest.raises(ValueError, match="max_retries"):
        SIERanker(max_retries=-1)


def test_timeout_and_max_retries_reach_the_client():
    """max_retries counts retries after the first try, as OpenAI's client does: 0 means one
    attempt, so an unreachable server fails at once instead of after the client's back-off."""
    import time

    from sie_client import SIEConnectionError

    embedder = SIETextEmbedder(url="http://127.0.0.1:9", timeout=3.0, max_retries=0)
    assert embedder.sync_client.timeout.read == 3.0 and embedder.sync_client.retry.max_attempts == 1
    start = time.monotonic()
    with pytest.raises(SIEConnectionError):
        embedder.run("x")
    assert time.monotonic() - start < 2.0
    assert SIETextEmbedder(url="http://127.0.0.1:9", max_retries=4).sync_client.retry.max_attempts == 5


def test_warm_up_close_and_successive_event_loops(sie_url):
    """warm_up / close and warm_up_async / close_async make and release the clients; each
    asyncio.run (a new event loop, as a Haystack AsyncPipeline run from a script) gets its own."""
    import asyncio

    embedder = SIETextEmbedder(model=MODEL, url=sie_url)
    embedder.warm_up()
    first = embedder.sync_client
    embedder.warm_up()
    assert embedder.sync_client is first
    vector = embedder.run("mount a disk")["embedding"]
    embedder.close()
    assert embedder._sync is None
    np.testing.assert_allclose(embedder.run("mount a disk")["embedding"], vector, atol=2e-5)  # made again
    assert embedder.sync_client is not first
    embedder.close()

    async def one_loop() -> list[float]:
        await embedder.warm_up_async()
        client = embedder._async
        await embedder.warm_up_async()
        assert embedder._async is client
        answer = (await embedder.run_async("mount a disk"))["embedding"]
        await embedder.close_async()
        assert embedder._async is None
        return answer

    for _ in range(2):
        np.testing.assert_allclose(asyncio.run(one_loop()), vector, atol=2e-5)


async def test_raise_on_failure(sie_url, caplog):
    """raise_on_failure=False (Haystack's default) logs a failed request and returns its
    documents without an embedding; True raises SIE's error. An error that blames the texts (400)
    is retried batch by batch, so the other batches keep their vectors."""
    from sie_client import SIEError

    documents = [Document(id=str(i), content=f"document {i}") for i in range(5)]
    failing = SIEDocumentEmbedder(model="test/no-such-model", url=sie_url, progress_bar=False)
    with caplog.at_level("ERROR", logger="sie_haystack.embedders"):
        out = failing.run(documents)["documents"]
    assert [d.embedding for d in out] == [None] * 5 and [d.id for d in out] == [d.id for d in documents]
    assert "404" in caplog.text and "0, 1, 2, 3, 4" in caplog.text
    assert [d.embedding for d in (await failing.run_async(documents))["documents"]] == [None] * 5
    raising = SIEDocumentEmbedder(model="test/no-such-model", url=sie_url, progress_bar=False, raise_on_failure=True)
    with pytest.raises(SIEError) as raised:
        raising.run(documents)
    assert raised.value.status == 404
    with pytest.raises(SIEError):
        await raising.run_async(documents)
    # dimensions beyond the model's width: a 400 for every batch, each one tried and logged
    caplog.clear()
    too_wide = SIEDocumentEmbedder(model=MODEL, url=sie_url, progress_bar=False, batch_size=2, dimensions=4096)
    with caplog.at_level("ERROR", logger="sie_haystack.embedders"):
        out = too_wide.run(documents)["documents"]
    assert [d.embedding for d in out] == [None] * 5
    assert caplog.text.count("400") >= 4  # the whole call, then the batches 0-1, 2-3, 4
