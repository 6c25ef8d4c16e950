"""jina-embeddings-v3's task adapters over HTTP on a real `sie-server serve`: the catalog's card over
a tiny random checkpoint in Jina's layout (tests/helpers/jina_checkpoints.py). Queries and documents
get retrieval.query and retrieval.passage (with their prompts) on /v1/encode and OpenAI's
/v1/embeddings alike; `profile`, Jina's own `task` on /v1/embeddings and Cohere's input_type on
/v2/embed select the others (with the rest of Jina's fields: embedding_type, normalized,
late_chunking); each equals transformers' port with that task's deltas merged. An unknown task is a
400 naming `task`. Late chunking equals `chunked_pooling` (jina-ai/late-chunking: the mean of each
span of the port's hidden states) over the texts read as one sequence."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import yaml

import sie_engine.catalog
from arch_fixtures import TEXTS, reference_hidden
from jina_checkpoints import PASSAGE_PROMPT, merged_model, task_adapter_checkpoint, task_reference
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
                                       "separation")}, checkpoint


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


@pytest.mark.parametrize(("field", "value"), [("late_chunking", "yes"), ("embedding_type", "binary"),
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


# ---- late chunking -------------------------------------------------------------------
def late_chunked_reference(checkpoint, task: str, prompt: str, texts: list[str], tmp: Path) -> np.ndarray:
    """jina-ai/late-chunking's way, on transformers' port: the prompt and the texts (each tokenised
    alone, without special tokens) between the tokenizer's special tokens as one sequence, then
    `chunked_pooling` (each text's span of hidden states summed over its length), L2 normalised."""
    from tokenizers import Tokenizer

    _, port, deltas = checkpoint
    tokenizer = Tokenizer.from_file(str(port / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    first, *last = tokenizer.encode("").ids  # the special tokens a single text gets: one before, the rest after
    ids, spans = [first, *tokenizer.encode(prompt, add_special_tokens=False).ids], []
    for text in texts:
        piece = tokenizer.encode(text, add_special_tokens=False).ids
        spans.append((len(ids), len(ids) + len(piece)))
        ids += piece
    ids += last
    hidden = reference_hidden(merged_model(port, deltas, task, tmp), [ids], pad_id=1)[0]
    pooled = torch.stack([hidden[start:end].sum(0) / (end - start) for start, end in spans])
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


CHUNKS = ["Berlin is the capital of Germany.", "Its population is 3.85 million.", "The city is also a state."]


@pytest.fixture(scope="module")
def late_references(references, tmp_path_factory):
    return {task: late_chunked_reference(references[2], task, prompt, CHUNKS, tmp_path_factory.mktemp(task))
            for task, prompt in (("text-matching", ""), ("retrieval.passage", PASSAGE_PROMPT))}


@pytest.mark.parametrize("task", ["text-matching", "retrieval.passage"])
def test_late_chunking_pools_each_chunk_over_the_whole_sequence(server, late_references, task):
    body = {"model": MODEL, "task": task, "late_chunking": True, "input": CHUNKS}
    late = rows(httpx.post(f"{server.url}/v1/embeddings", json=body, timeout=60), "data", "embedding")
    np.testing.assert_allclose(late, late_references[task], atol=ATOL, rtol=0)
    native = rows(httpx.post(f"{server.url}/v1/encode/{MODEL}", json={"items": CHUNKS, "profile": task,
                                                                      "late_chunking": True}, timeout=60))
    np.testing.assert_allclose(native, late, atol=1e-6, rtol=0)
    alone = rows(httpx.post(f"{server.url}/v1/embeddings", json={**body, "late_chunking": False}, timeout=60),
                 "data", "embedding")
    assert np.abs(alone - late).max() > 1e-2  # each chunk's vector saw the others: not what it gets alone


def test_the_client_sends_a_late_chunked_document_as_one_request(server, late_references):
    from sie_client import SIEClient

    with SIEClient(server.url, batch_size=1) as client:  # one item per request, but for late chunking
        result = client.encode(MODEL, CHUNKS, profile="text-matching", late_chunking=True)
    got = np.stack([item.dense for item in result.items])
    np.testing.assert_allclose(got, late_references["text-matching"], atol=ATOL, rtol=0)


def test_late_chunked_and_plain_requests_batched_together_answer_as_alone(server, late_references, references):
    from concurrent.futures import ThreadPoolExecutor

    late = {"model": MODEL, "task": "text-matching", "late_chunking": True, "input": CHUNKS}
    plain = {"model": MODEL, "task": "text-matching", "input": TEXTS}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda body: httpx.post(f"{server.url}/v1/embeddings", json=body, timeout=60),
                                [late, plain] * 6))
    for i, answer in enumerate(answers):
        want = late_references["text-matching"] if i % 2 == 0 else references[1]["text-matching"]
        np.testing.assert_allclose(rows(answer, "data", "embedding"), want, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"input": ["word " * 40] * 4}, "late_chunking", "window of 120"),  # the test card's max_seq_len
    ({"input": ["a chunk"], "dimensions": 2048}, "dimensions", ""),
])
def test_late_chunking_beyond_what_it_serves_is_a_400(server, body, param, words):
    answer = httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL, "late_chunking": True, **body},
                        timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and words in error["message"], error


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"items": ["a chunk", ""]}, "items[1]", "no tokens"),  # OpenAI's route refuses an empty input itself
    ({"items": ["a chunk", {"image": "aGk="}]}, "items[1].image", "takes text items only"),
    ({"items": ["a chunk"], "output_types": ["sparse"]}, "output_types", ""),
    ({"items": ["a chunk"], "sparse_labels": True}, "sparse_labels", ""),
])
def test_late_chunking_on_encode_names_what_it_cannot_serve(server, body, field, words):
    answer = httpx.post(f"{server.url}/v1/encode/{MODEL}", json={"late_chunking": True, **body}, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and words in error["message"], error
