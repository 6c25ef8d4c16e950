"""The async client, and the adapters built on it, from successive event loops against a real
`sie-server` on loopback: LlamaIndex (PropertyGraphIndex, `asyncio.run` per step), scripts and
notebooks call `asyncio.run` more than once, each a new loop, and an HTTP client bound to the
first loop failed the second with "Event loop is closed". Also two loops at once in two threads,
and close() after the loops that used the client are gone."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from framework_fixtures import EXTRACTOR, LABELS, RELATION_MODEL, tiny_relation_models
from integration_recall import MODEL, sie_server
from sie_client import AsyncSIEClient, SIEClient

TEXTS = ["how do I mount a USB disk", "the capital of France is Paris", "football is a sport"]


@pytest.fixture(scope="module")
def relation_models(tmp_path_factory):
    return tiny_relation_models(tmp_path_factory.mktemp("loop-relations"))


@pytest.fixture(scope="module")
def url(relation_models):
    with sie_server("--model", f"{RELATION_MODEL}={relation_models[RELATION_MODEL]}",
                    "--model", f"{EXTRACTOR}={relation_models[EXTRACTOR]}") as server_url:
        yield server_url


@pytest.fixture(scope="module")
def expected(url):
    with SIEClient(url) as client:
        return client.encode(MODEL, TEXTS).dense_matrix()


def test_async_client_from_three_successive_event_loops(url, expected):
    client = AsyncSIEClient(url, batch_size=2)  # two requests per call, concurrent on each loop

    async def encode() -> np.ndarray:
        return (await client.encode(MODEL, TEXTS)).dense_matrix()

    for _ in range(3):
        np.testing.assert_allclose(asyncio.run(encode()), expected, atol=1e-5)
    models = asyncio.run(client.models())
    assert MODEL in {m.id for m in models}
    assert len(client._transport._clients) == 0  # every loop that used it is closed: nothing held for them
    asyncio.run(client.close())  # closing after those loops are gone touches none of them


def test_one_async_client_on_two_loops_at_once(url, expected):
    """Two threads, each with its own loop, share one client: each loop gets its own pool."""
    client = AsyncSIEClient(url)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        async def twice() -> np.ndarray:
            await client.encode(MODEL, TEXTS[:1])
            return (await client.encode(MODEL, TEXTS)).dense_matrix()

        try:
            results[i] = asyncio.run(twice())
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    for i in range(2):
        np.testing.assert_allclose(results[i], expected, atol=1e-5)


def test_async_client_inside_a_long_lived_loop_keeps_one_pool(url, expected):
    async def many() -> int:
        client = AsyncSIEClient(url)
        for _ in range(3):
            np.testing.assert_allclose((await client.encode(MODEL, TEXTS)).dense_matrix(), expected, atol=1e-5)
        held = len(client._transport._clients)
        await client.close()
        return held

    assert asyncio.run(many()) == 1


def test_llamaindex_embedding_by_url_from_successive_loops(url, expected):
    pytest.importorskip("llama_index.core")
    from sie_llamaindex import SIEEmbedding

    embedding = SIEEmbedding(model=MODEL, url=url)
    for text, row in zip(TEXTS, expected):
        np.testing.assert_allclose(asyncio.run(embedding.aget_text_embedding(text)), row, atol=1e-5)
    np.testing.assert_allclose(asyncio.run(embedding.aget_text_embedding_batch(TEXTS)), expected, atol=1e-5)


def test_llamaindex_property_graph_index_by_url(url):
    """The README's recipe: PropertyGraphIndex with SIE's path extractor and SIEEmbedding by URL,
    no LLM; it runs `asyncio.run` for the extraction and again for each embedding step."""
    pytest.importorskip("llama_index.core")
    from llama_index.core import PropertyGraphIndex
    from llama_index.core.graph_stores import SimplePropertyGraphStore
    from llama_index.core.schema import TextNode

    from sie_llamaindex import SIEEmbedding, SIEPathExtractor

    relations = ["born in", "works for", "located in", "founded"]
    texts = ["Ada Lovelace worked with Charles Babbage in London.", "Paris is the capital of France.",
             "Guido van Rossum created Python at CWI in Amsterdam."]
    extractor = SIEPathExtractor(model=RELATION_MODEL, entity_model=EXTRACTOR, entity_labels=LABELS,
                                 relation_labels=relations, threshold=0.0, url=url)
    embed_model = SIEEmbedding(model=MODEL, url=url)
    index = PropertyGraphIndex(nodes=[TextNode(id_=str(i), text=t) for i, t in enumerate(texts)],
                               kg_extractors=[extractor], embed_model=embed_model,
                               property_graph_store=SimplePropertyGraphStore(), show_progress=False)
    with SIEClient(url) as client:
        answer = client.extract(RELATION_MODEL, texts, relations, entity_model=EXTRACTOR, entity_labels=LABELS,
                                threshold=0.0)
    expected = {(r.head.text, r.relation, r.tail.text) for item in answer.items for r in item.relations
                if (r.head.start, r.head.end) != (r.tail.start, r.tail.end)}
    triplets = index.property_graph_store.get_triplets(relation_names=relations)
    assert expected and {(h.name, r.label, t.name) for h, r, t in triplets} == expected
    # the entities were embedded on later loops than the extraction's, by the same SIEEmbedding
    node = triplets[0][0]
    assert asyncio.run(embed_model.aget_query_embedding(node.name))


def test_langchain_and_haystack_async_calls_from_successive_loops(url, expected):
    pytest.importorskip("langchain_core")
    pytest.importorskip("haystack")
    from sie_haystack import SIETextEmbedder
    from sie_langchain import SIEEmbeddings

    langchain = SIEEmbeddings(model=MODEL, url=url)
    haystack = SIETextEmbedder(model=MODEL, url=url)
    for _ in range(2):
        np.testing.assert_allclose(asyncio.run(langchain.aembed_documents(TEXTS)), expected, atol=1e-5)
        query = asyncio.run(haystack.run_async(TEXTS[0]))["embedding"]
        np.testing.assert_allclose(query, expected[0], atol=1e-5)  # MiniLM has no query prompt
