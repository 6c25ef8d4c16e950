"""LlamaIndex with sie_llamaindex, on the real llama-index-core and its Chroma vector
store: a VectorStoreIndex over ChromaVectorStore (in-memory Chroma) embedded by
SIEEmbedding must retrieve with the recall@10 of SIE's own Chroma function (within 1
point); the node postprocessor and the metadata extractor must hand back SIE's own
answers (tiny random models: wiring, not quality); async variants equal sync ones."""

from __future__ import annotations

import re

import chromadb
import numpy as np
import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("llama_index.vector_stores.chroma")
from chromadb.config import Settings  # noqa: E402
from llama_index.core import StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.ingestion import IngestionPipeline  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode  # noqa: E402
from llama_index.vector_stores.chroma import ChromaVectorStore  # noqa: E402

from framework_fixtures import (  # noqa: E402
    EXTRACTOR,
    GLINER2_MODEL,
    LABELS,
    RELATION_MODEL,
    ModeRecordingClient,
    assert_framework_recall,
    sie_chroma_recall,
    tiny_models,
)
from integration_recall import MODEL, RERANKER, recall, sample  # noqa: E402
from sie_client import AsyncSIEClient  # noqa: E402
from sie_llamaindex import SIEEmbedding, SIEEntityExtractor, SIERerank  # noqa: E402


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    """One embedded engine for the module, behind a sync client that records query modes
    and an async client."""
    models = tiny_models(tmp_path_factory.mktemp("llamaindex-models"))
    return ModeRecordingClient("embedded", local_models=models), AsyncSIEClient("embedded", local_models=models)


def nodes_of(docs) -> list[TextNode]:
    return [TextNode(id_=d["id"], text=d["text"]) for d in docs]


def test_retrieval_recall_equals_sie_chroma(clients):
    sync, async_client = clients
    docs, queries = sample()
    collection = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False)).get_or_create_collection(
        "llamaindex", configuration={"hnsw": {"space": "cosine"}})
    embed_model = SIEEmbedding(model=MODEL, client=sync, async_client=async_client)
    sync.modes.clear()
    index = VectorStoreIndex(nodes_of(docs), embed_model=embed_model,
                             storage_context=StorageContext.from_defaults(
                                 vector_store=ChromaVectorStore(chroma_collection=collection)))
    assert set(sync.modes) == {False} and len(sync.modes) == -(-len(docs) // embed_model.embed_batch_size)
    retriever = index.as_retriever(similarity_top_k=10)
    sync.modes.clear()
    found = [[n.node.node_id for n in retriever.retrieve(q["query"])] for q in queries]
    assert set(sync.modes) == {True}
    assert_framework_recall(recall(found, queries), sie_chroma_recall(), "llamaindex ChromaVectorStore")


async def test_async_embedding_equals_sync(clients):
    sync, async_client = clients
    texts = [d["text"] for d in sample()[0][:20]]
    for embed_model in (SIEEmbedding(model=MODEL, client=sync, async_client=async_client),
                        SIEEmbedding(model=MODEL, client=sync)):  # no async client: the sync one in a thread
        np.testing.assert_allclose(await embed_model.aget_text_embedding_batch(texts),
                                   embed_model.get_text_embedding_batch(texts), atol=2e-5)
        np.testing.assert_allclose(await embed_model.aget_query_embedding(texts[0]),
                                   embed_model.get_query_embedding(texts[0]), atol=2e-5)
        np.testing.assert_allclose(await embed_model.aget_text_embedding(texts[1]),
                                   embed_model.get_text_embedding(texts[1]), atol=2e-5)
    saved = SIEEmbedding(model=MODEL, url="http://127.0.0.1:9", api_key="k", dimensions=128).to_dict()
    assert "api_key" not in saved and saved["model_name"] == MODEL
    assert SIEEmbedding.from_dict(saved).to_dict() == saved


async def test_rerank_orders_by_sie_scores(clients):
    sync, async_client = clients
    docs, queries = sample()
    nodes = [NodeWithScore(node=node, score=0.5) for node in nodes_of(docs[:20])]
    rerank = SIERerank(model=RERANKER, top_n=5, client=sync, async_client=async_client)
    for q in queries[:3]:
        texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        scored = sync.score(RERANKER, q["query"], texts, top_k=5)
        reranked = rerank.postprocess_nodes(nodes, query_str=q["query"])
        assert [n.node.node_id for n in reranked] == [nodes[s.index].node.node_id for s in scored.scores]
        assert [n.score for n in reranked] == pytest.approx([s.score for s in scored.scores], abs=1e-6)
        again = await rerank.apostprocess_nodes(nodes, query_str=q["query"])
        assert [n.node.node_id for n in again] == [n.node.node_id for n in reranked]
    with pytest.raises(ValueError, match="query"):
        rerank.postprocess_nodes(nodes)
    kept = SIERerank(model=RERANKER, top_n=2, keep_retrieval_score=True, client=sync)
    assert [n.node.metadata["retrieval_score"] for n in kept.postprocess_nodes(nodes, query_str="x")] == [0.5, 0.5]


def test_entity_extractor_in_an_ingestion_pipeline(clients):
    """SIEEntityExtractor then SIEEmbedding in LlamaIndex's IngestionPipeline: entity metadata
    as SIE extracts it, and nodes embedded from their text."""
    sync, async_client = clients
    texts = ["Ada Lovelace worked with Charles Babbage in London.", *[d["text"] for d in sample()[0][:15]]]
    extractor = SIEEntityExtractor(model=EXTRACTOR, labels=LABELS, client=sync, async_client=async_client,
                                   show_progress=False)
    pipeline = IngestionPipeline(transformations=[extractor, SIEEmbedding(model=MODEL, client=sync)])
    nodes = pipeline.run(nodes=[TextNode(id_=str(i), text=t) for i, t in enumerate(texts)])
    expected = sync.extract(EXTRACTOR, texts, LABELS)
    assert any(item.entities for item in expected.items), "the tiny GLiNER found nothing to compare"
    for node, item in zip(sorted(nodes, key=lambda n: int(n.node_id)), expected.items):
        ordered = sorted(item.entities, key=lambda e: (e.start, e.end))
        assert node.metadata.get("entities", []) == list(dict.fromkeys(e.text for e in ordered))
        assert node.embedding is not None and len(node.embedding) == 384
    by_label = SIEEntityExtractor(model=EXTRACTOR, labels=LABELS, label_entities=True, client=sync,
                                  show_progress=False).extract([TextNode(text=t) for t in texts])
    for metadata, item in zip(by_label, expected.items):
        assert {label: sorted(values) for label, values in metadata.items()} == \
            {label: sorted({e.text for e in item.entities if e.label == label})
             for label in {e.label for e in item.entities}}



@pytest.fixture(scope="module")
def relation_models(tmp_path_factory):
    """An embedded client serving a tiny GLiREL, its tiny GLiNER entity model and a tiny GLiNER2."""
    from framework_fixtures import tiny_relation_models
    from sie_client import SIEClient

    with SIEClient("embedded", local_models=tiny_relation_models(tmp_path_factory.mktemp("relations"))) as client:
        yield client


def test_path_extractor_builds_a_property_graph(clients, relation_models):
    """SIEPathExtractor as PropertyGraphIndex's only kg_extractor, no LLM, with a relation model and
    a GLiNER entity model: the graph store holds SIE's triples (relations scored, entities typed),
    and a retriever over the graph embedded by SIEEmbedding finds a triple by its head."""
    from llama_index.core import PropertyGraphIndex
    from llama_index.core.graph_stores import SimplePropertyGraphStore
    from llama_index.core.indices.property_graph import VectorContextRetriever
    from test_glirel import RELATIONS

    from sie_llamaindex import SIEPathExtractor

    sync, _ = clients
    texts = ["Ada Lovelace worked with Charles Babbage in London.", *[d["text"] for d in sample()[0][:15]]]
    extractor = SIEPathExtractor(model=RELATION_MODEL, entity_model=EXTRACTOR, entity_labels=LABELS,
                                 relation_labels=RELATIONS, threshold=0.0, client=relation_models)
    index = PropertyGraphIndex(nodes=[TextNode(id_=str(i), text=t, metadata={"doc": i}) for i, t in enumerate(texts)],
                               kg_extractors=[extractor], embed_model=SIEEmbedding(model=MODEL, client=sync),
                               property_graph_store=SimplePropertyGraphStore(), show_progress=False)
    answer = relation_models.extract(RELATION_MODEL, texts, RELATIONS, entity_model=EXTRACTOR,
                                     entity_labels=LABELS, threshold=0.0)
    expected = {(r.head.text, r.relation, r.tail.text) for item in answer.items for r in item.relations}
    triplets = index.property_graph_store.get_triplets(relation_names=list(RELATIONS))
    assert expected and {(h.name, r.label, t.name) for h, r, t in triplets} == expected
    assert all(h.label in LABELS and t.label in LABELS for h, _, t in triplets)  # typed by the GLiNER
    assert all(0.0 <= r.properties["score"] <= 1.0 and "doc" in r.properties for _, r, _ in triplets)
    retriever = index.as_retriever(sub_retrievers=[VectorContextRetriever(
        index.property_graph_store, include_text=False, embed_model=SIEEmbedding(model=MODEL, client=sync),
        vector_store=index.vector_store, similarity_top_k=1)])
    # The index embeds an entity as str(node) (its name and properties): asked with that text, the
    # node is its own nearest neighbour even under a tiny random embedder. The head is one with a
    # wordlike name (the tiny models also tag spans like '").'), chosen by name, not by the order
    # in which the concurrent extraction happened to store the triples.
    head = min((h for h, _, _ in triplets if re.fullmatch(r"\w[\w ]*\w", h.name)), key=lambda node: node.name)
    paths = retriever.retrieve(str(head))
    assert paths[0].score == pytest.approx(1.0) and any(head.name in n.node.get_content() for n in paths)


async def test_path_extractor_with_gliner2_leaves_out_self_references(relation_models):
    """GLiNER2 answers entities and triples in one pass; a triple whose head and tail are the same
    span is no path (the tiny random model gives some), and the async call tags as the sync one."""
    from llama_index.core.graph_stores.types import KG_NODES_KEY, KG_RELATIONS_KEY
    from test_gliner2 import LABELS as TYPES
    from test_gliner2 import RELATIONS, TEXTS

    from sie_llamaindex import SIEPathExtractor

    extractor = SIEPathExtractor(model=GLINER2_MODEL, entity_labels=TYPES, relation_labels=RELATIONS,
                                 threshold=0.0, client=relation_models)
    nodes = extractor([TextNode(text=t, metadata={"kind": "bio"}) for t in TEXTS])
    again = await extractor.acall([TextNode(text=t, metadata={"kind": "bio"}) for t in TEXTS])
    answer = relation_models.extract(GLINER2_MODEL, TEXTS, TYPES, relation_labels=RELATIONS, threshold=0.0)
    same_span = 0
    for node, other, item in zip(nodes, again, answer.items):
        assert {(n.name, n.label) for n in node.metadata[KG_NODES_KEY]} >= {(e.text, e.label) for e in item.entities}
        kept = {(r.head.text, r.relation, r.tail.text) for r in item.relations
                if (r.head.start, r.head.end) != (r.tail.start, r.tail.end)}
        same_span += sum((r.head.start, r.head.end) == (r.tail.start, r.tail.end) for r in item.relations)
        paths = node.metadata[KG_RELATIONS_KEY]
        assert {(r.source_id, r.label, r.target_id) for r in paths} == kept
        assert [r.id for r in paths] == [r.id for r in other.metadata[KG_RELATIONS_KEY]]
    assert same_span, "the tiny GLiNER2 gave no same-span triple to leave out"
