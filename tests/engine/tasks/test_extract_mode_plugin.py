"""A new extract mode is one module and one registry entry: `nearest` (tests/plugins/toy_mode.py,
classification by embedding similarity), registered here in the test only, is picked by a card
with its output, refuses the fields it does not declare with the generic message, and serves
over HTTP (a real server on loopback), in OpenAPI and through the typed client (HTTP and
embedded); its answers equal sentence-transformers' cosines on the same checkpoint.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from sie_client import AsyncSIEClient
from sie_contract import registry as task_registry
from sie_engine import Catalog, Engine
from sie_engine.errors import InvalidRequest
from sie_engine.models import HEADS
from sie_engine.tasks import extract
from sie_server import ServerSettings, create_app
from tiny_models import MINILM_DIR

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MODEL = "toy/nearest"
TEXTS = ["The striker scored twice in the final.", "Interest rates rose again this quarter.",
         "A new telescope photographed a distant galaxy."]
LABELS = ["sports", "economy", "astronomy", "cooking"]


@pytest.fixture(scope="module")
def registered():
    extract.register("nearest", "plugins.toy_mode:MODE")  # the one registry entry
    try:
        yield
    finally:
        extract.unregister("nearest")
    assert "nearest" not in extract.MODES and "nearest" not in HEADS
    assert "nearest" not in task_registry.get("extract").served_by


@pytest.fixture(scope="module")
def engine(registered):
    catalog = Catalog.builtin()
    catalog.add(dataclasses.replace(catalog.get(MINILM), id=MODEL, outputs=("nearest",),
                                    description="MiniLM as an embedding-similarity classifier"))
    with Engine(catalog, device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def expected():
    """Per text, (label, cosine) best first, from sentence-transformers (mean pooling, normalised)."""
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(MINILM_DIR), device="cpu")
    texts = reference.encode(TEXTS, normalize_embeddings=True)
    labels = reference.encode(LABELS, normalize_embeddings=True)
    similarity = texts @ labels.T
    return [[(LABELS[j], float(row[j])) for j in np.argsort(-row, kind="stable")] for row in similarity]


def assert_answers(items, expected, top_k=None):
    """items: (id, [(label, score)]) per text, as any of the three surfaces answers."""
    assert [item_id for item_id, _ in items] == [str(i) for i in range(len(TEXTS))]
    for (_, got), want in zip(items, expected):
        want = want[:top_k]
        assert [label for label, _ in got] == [label for label, _ in want]
        np.testing.assert_allclose([score for _, score in got], [score for _, score in want], atol=1e-5)


def test_the_card_serves_extract_through_the_mode(engine, expected):
    assert engine.card(MODEL).tasks == ("extract",)
    result = engine.extract_sync(MODEL, TEXTS, LABELS)
    assert_answers([(i.id, [(c.label, c.score) for c in i.classifications]) for i in result.items], expected)
    assert all(i.entities == [] and i.relations is None for i in result.items)
    assert result.tokens > 0
    top = engine.extract_sync(MODEL, TEXTS, LABELS, top_k=2)
    assert_answers([(i.id, [(c.label, c.score) for c in i.classifications]) for i in top.items], expected, top_k=2)


def test_fields_it_does_not_declare_are_refused_by_the_generic_message(engine):
    with pytest.raises(InvalidRequest) as caught:
        engine.extract_sync(MODEL, TEXTS, LABELS, flat=False)
    assert caught.value.field == "flat"
    assert str(caught.value) == ("flat applies to GLiNER entity models; model 'toy/nearest' is an "
                                 "embedding-similarity classifier (it takes its candidate classes in labels and "
                                 "answers classifications)")
    # and a built-in mode's refusal now names the plug-in among the models that take top_k
    gliner = engine.card("EmergentMethods/gliner_medium_news-v2.1")
    with pytest.raises(InvalidRequest, match="embedding-similarity") as caught:
        extract.refuse_other_fields(gliner, extract.mode("extract"), {"top_k": 2})
    assert caught.value.field == "top_k"


async def test_http_openapi_and_the_typed_client(engine, expected):
    app = create_app(engine, ServerSettings())
    async with TestClient(TestServer(app, host="127.0.0.1")) as server:
        answer = await server.post(f"/v1/extract/{MODEL}", json={"items": TEXTS, "labels": LABELS, "top_k": 3})
        assert answer.status == 200, await answer.text()
        body = await answer.json()
        assert body["model"] == MODEL and body["usage"]["tokens"] > 0
        assert_answers([(i["id"], [(c["label"], c["score"]) for c in i["classifications"]]) for i in body["items"]],
                       expected, top_k=3)
        refused = await server.post(f"/v1/extract/{MODEL}", json={"items": TEXTS, "labels": LABELS,
                                                                   "hypothesis_template": "It is {}."})
        assert refused.status == 400
        assert (await refused.json())["error"]["field"] == "hypothesis_template"

        listed = await (await server.get(f"/v1/models/{MODEL}")).json()
        assert listed["tasks"] == ["extract"] and listed["outputs"] == ["nearest"]
        document = await (await server.get("/openapi.json")).json()
        assert "/v1/extract/{model}" in document["paths"]
        assert "top_k" in document["components"]["schemas"]["ExtractRequest"]["properties"]

        url = str(server.make_url("")).rstrip("/")
        async with AsyncSIEClient(url, encoding="json") as client:
            over_http = await client.extract(MODEL, TEXTS, LABELS, top_k=2, batch_size=2)  # two chunks, in order
        async with AsyncSIEClient(engine=engine) as client:
            embedded = await client.extract(MODEL, TEXTS, LABELS, top_k=2)
    for result in (over_http, embedded):
        assert result.model == MODEL
        assert_answers([(i.id, [(c.label, c.score) for c in i.classifications]) for i in result.items], expected,
                       top_k=2)


def test_a_declaration_naming_an_unknown_field_is_refused_at_registration(registered):
    with pytest.raises(ValueError, match="colour"):
        extract.register("broken", "plugins.toy_mode:BROKEN")
    assert "broken" not in extract.MODES
