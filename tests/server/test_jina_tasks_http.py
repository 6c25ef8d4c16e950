"""jina-embeddings-v3's task adapters over HTTP on a real `sie-server serve`: the catalog's card over
a tiny random checkpoint in Jina's layout (tests/helpers/jina_checkpoints.py). Queries and documents
get retrieval.query and retrieval.passage (with their prompts) on /v1/encode and OpenAI's
/v1/embeddings alike; `profile`, Jina's own `task` on /v1/embeddings and Cohere's input_type on
/v2/embed select the others (with the rest of Jina's fields: embedding_type, normalized,
late_chunking false); each
equals transformers' port with that task's deltas merged. An unknown task is a 400 naming `task`."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

import sie_engine.catalog
from arch_fixtures import TEXTS
from jina_checkpoints import task_adapter_checkpoint, task_reference
from server_fixtures import start_server

CARD = Path(sie_engine.catalog.__file__).parent / "jina-embeddings-v3.yaml"  # the shipped card
MODEL = "jinaai/jina-embeddings-v3"
ATOL = 2e-5  # float32, merged weights (the reference) against the deltas added apart (SIE)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    checkpoint = task_adapter_checkpoint(tmp_path_factory.mktemp("jina-v3"))
    merged = tmp_path_factory.mktemp("merged")
    return checkpoint[0], {task: task_reference(checkpoint, task, TEXTS, merged)
                           for task in ("retrieval.query", "retrieval.passage", "text-matching", "classification",
                                       "separation")}


@pytest.fixture(scope="module")
def server(references, tmp_path_factory):
    card = yaml.safe_load(CARD.read_text())
    card.update(weights={"path": str(references[0])}, max_seq_len=120)
    cards = tmp_path_factory.mktemp("cards")
    (cards / "jina.yaml").write_text(json.dumps(card))  # a user card of the same id replaces the catalog's
    process = start_server("--models", str(cards), "--no-builtin", "--preload", MODEL, "--device", "cpu",
                           log_dir=tmp_path_factory.mktemp("log"))
    try:
        yield process
    finally:
        process.stop()


def rows(answer: httpx.Response, key: str = "items", field: str = "dense") -> np.ndarray:
    assert answer.status_code == 200, answer.text
    return np.asarray([item[field] for item in answer.json()[key]], dtype=np.float32)


@pytest.mark.parametrize(("body", "task"), [
    ({"is_query": True}, "retrieval.query"), ({}, "retrieval.passage"),
    ({"profile": "text-matching"}, "text-matching"), ({"lora_id": "classification", "template": False},
                                                      "classification"),
])
def test_encode_runs_each_task_as_jina_does(server, references, body, task):
    got = rows(httpx.post(f"{server.url}/v1/encode/{MODEL}", json={"items": TEXTS, **body}, timeout=60))
    np.testing.assert_allclose(got, references[1][task], atol=ATOL, rtol=0)


@pytest.mark.parametrize(("body", "task"), [
    ({"input_type": "query"}, "retrieval.query"), ({}, "retrieval.passage"),
    ({"task": "retrieval.query"}, "retrieval.query"), ({"task": "text-matching"}, "text-matching"),
])
def test_openai_embeddings_take_input_type_and_jinas_task(server, references, body, task):
    answer = httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL, "input": TEXTS, **body}, timeout=60)
    np.testing.assert_allclose(rows(answer, "data", "embedding"), references[1][task], atol=ATOL, rtol=0)


@pytest.mark.parametrize(("input_type", "task"), [
    ("search_query", "retrieval.query"), ("search_document", "retrieval.passage"),
    ("classification", "classification"), ("clustering", "separation"),
])
def test_cohere_input_types_select_the_tasks(server, references, input_type, task):
    answer = httpx.post(f"{server.url}/v2/embed", json={"model": MODEL, "texts": TEXTS, "input_type": input_type,
                                                        "embedding_types": ["float"]}, timeout=60)
    assert answer.status_code == 200, answer.text
    got = np.asarray(answer.json()["embeddings"]["float"], dtype=np.float32)
    np.testing.assert_allclose(got, references[1][task], atol=ATOL, rtol=0)


def test_a_jina_api_client_body_is_served(server, references):
    """What Jina's own examples and LlamaIndex's JinaEmbedding send to api.jina.ai/v1/embeddings."""
    body = {"model": MODEL, "task": "text-matching", "late_chunking": False, "embedding_type": "float", "input": TEXTS}
    answer = httpx.post(f"{server.url}/v1/embeddings", json=body, timeout=60)
    want = references[1]["text-matching"]
    np.testing.assert_allclose(rows(answer, "data", "embedding"), want, atol=ATOL, rtol=0)
    packed = httpx.post(f"{server.url}/v1/embeddings", json={**body, "embedding_type": None, "encoding_type": "base64"},
                        timeout=60)
    assert packed.status_code == 200, packed.text
    got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in packed.json()["data"]])
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    pooled = rows(httpx.post(f"{server.url}/v1/embeddings", json={**body, "normalized": False}, timeout=60),
                  "data", "embedding")
    norms = np.linalg.norm(pooled, axis=1)
    assert np.abs(norms - 1).max() > 1e-3  # as pooled: not unit vectors
    np.testing.assert_allclose(pooled / norms[:, None], want, atol=1e-4, rtol=0)


@pytest.mark.parametrize(("field", "value"), [("late_chunking", True), ("embedding_type", "binary"),
                                              ("normalized", "yes"), ("encoding_type", "ubinary")])
def test_what_jinas_fields_ask_that_sie_does_not_serve_is_a_400(server, field, value):
    answer = httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL, "input": TEXTS, field: value},
                        timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == field, answer.text


def test_an_unknown_task_is_a_400_naming_it(server):
    answer = httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL, "input": TEXTS, "task": "text-match"},
                        timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "task" and "did you mean 'text-matching'" in error["message"], error
    answer = httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL, "input": TEXTS, "task": 3}, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "task", answer.text


def test_the_model_lists_its_tasks(server):
    entry = httpx.get(f"{server.url}/v1/models/{MODEL}", timeout=30).json()
    tasks = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
    assert entry["adapters"] == tasks and entry["profiles"] == [*tasks, "clustering"]
