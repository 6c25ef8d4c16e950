"""The engine server over HTTP, on a real `sie-server serve` subprocess: every
route with the real default model, JSON and msgpack, the official `openai`
client, batching of concurrent requests, and the error table of docs/api.md.

One server per module (several seconds to start); its answers are compared
with an in-process `Engine` over the same catalog.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
from pathlib import Path

import aiohttp
import httpx
import msgpack
import numpy as np
import openai
import pytest
import yaml

from dev_corpus import load_docs
from server_fixtures import DEFAULT_MODEL, metric_value, start_server
from sie_engine import Catalog, Engine, card_from_local_dir
from sie_server.codec import decode_tensor
from tiny_models import MINILM_DIR, save_tiny, tiny_bert_config

SPLADE_DIR = Path(list(importlib.util.find_spec("cognition").submodule_search_locations)[0]) / "model"
LOCAL = "local/minilm"
CROSS = "ce/tiny"
SPLADE = "splade/tiny"
MAX_ITEMS = 64
TEXTS = [d["text"] for d in load_docs(12)]


@pytest.fixture(scope="module")
def cards_dir(tmp_path_factory):
    """A --models directory: a tiny random cross-encoder and the real SPLADE-tiny."""
    import torch
    from transformers import BertForSequenceClassification

    base = tmp_path_factory.mktemp("cards")
    torch.manual_seed(0)
    cross_root = save_tiny(BertForSequenceClassification(tiny_bert_config(num_labels=1)).eval(), base / "ce")
    cards = {
        "ce.yaml": {"id": CROSS, "weights": {"path": str(cross_root)}, "outputs": ["score"], "max_seq_len": 120,
                    "max_batch_tokens": 2048},
        "splade.yaml": {"id": SPLADE, "weights": {"path": str(SPLADE_DIR)}, "outputs": ["sparse"], "max_seq_len": 512,
                        "max_batch_tokens": 4096},
    }
    directory = base / "cards"
    directory.mkdir()
    for name, card in cards.items():
        (directory / name).write_text(yaml.safe_dump(card))
    return directory


@pytest.fixture(scope="module")
def server(cards_dir, tmp_path_factory):
    process = start_server("--preload", DEFAULT_MODEL, "--models", str(cards_dir), "--model", f"{LOCAL}={MINILM_DIR}",
                           "--max-items", str(MAX_ITEMS), "--max-body-bytes", "1MiB",
                           log_dir=tmp_path_factory.mktemp("server"))
    yield process
    assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def engine(cards_dir):
    catalog = Catalog.builtin()
    catalog.add_directory(cards_dir)
    catalog.add(card_from_local_dir(LOCAL, MINILM_DIR))
    with Engine(catalog, device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def encode_url(model: str = DEFAULT_MODEL) -> str:
    return f"/v1/encode/{model}"


def post_msgpack(http, path, body, **headers):
    return http.post(path, content=msgpack.packb(body), headers={"Content-Type": "application/msgpack", **headers})


def dense_of(answer: dict) -> np.ndarray:
    return np.array([item["dense"] for item in answer["items"]], dtype=np.float32)


# ---- health, description, models --------------------------------------------
def test_health_readiness_and_openapi(http):
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200
    paths = http.get("/openapi.json").json()["paths"]
    for route in ("/v1/encode/{model}", "/v1/score/{model}", "/v1/extract/{model}", "/v1/embeddings", "/v1/models",
                  "/v1/models/{model}", "/v1/status", "/healthz", "/readyz", "/metrics", "/openapi.json"):
        assert route in paths


def test_metrics_exposes_every_documented_name(http):
    text = http.get("/metrics").text
    names = ["sie_requests_total", "sie_request_duration_seconds", "sie_queued_items", "sie_queued_tokens",
             "sie_inflight_requests", "sie_batch_tokens", "sie_batch_items", "sie_batches_total",
             "sie_tokens_processed_total", "sie_models_loaded", "sie_model_memory_bytes", "sie_memory_budget_bytes",
             "sie_model_loads_total", "sie_model_load_failures_total", "sie_model_evictions_total",
             "sie_model_load_seconds", "sie_rejected_total"]
    for name in names:
        assert f"# TYPE {name} " in text, name
    # the preload is counted and charged
    assert metric_value(text, "sie_model_loads_total", model=DEFAULT_MODEL) == 1
    assert metric_value(text, "sie_models_loaded") >= 1
    assert metric_value(text, "sie_model_memory_bytes", model=DEFAULT_MODEL) > 0
    assert metric_value(text, "sie_memory_budget_bytes") > 0


def test_models_list_and_one_model_with_a_slash_in_its_id(http):
    listed = http.get("/v1/models").json()
    assert listed["object"] == "list"
    by_id = {m["id"]: m for m in listed["data"]}
    assert {DEFAULT_MODEL, LOCAL, CROSS, SPLADE} <= set(by_id)
    default = by_id[DEFAULT_MODEL]
    assert default["state"] == "loaded" and default["dims"] == {"dense": 384} and default["tasks"] == ["encode"]
    assert default["memory_bytes"] > 0 and default["object"] == "model" and default["owned_by"] == "sie"
    assert by_id[CROSS]["tasks"] == ["score"]
    one = http.get(f"/v1/models/{DEFAULT_MODEL}").json()
    assert one["id"] == DEFAULT_MODEL and one["max_seq_len"] == 256
    missing = http.get("/v1/models/nobody/nothing")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_status_for_the_router(http):
    status = http.get("/v1/status").json()
    assert status["ready"] is True and status["draining"] is False and status["pool"] == "default"
    assert status["models"][DEFAULT_MODEL]["state"] == "loaded"
    assert status["queued_tokens"] == 0 and status["queued_items"] == 0


# ---- encode ------------------------------------------------------------------
def test_encode_equals_the_engine(http, engine):
    answer = http.post(encode_url(), json={"items": [{"text": t} for t in TEXTS]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = engine.encode_sync(DEFAULT_MODEL, TEXTS)
    assert body["model"] == DEFAULT_MODEL
    assert [item["id"] for item in body["items"]] == [str(i) for i in range(len(TEXTS))]
    np.testing.assert_allclose(dense_of(body), np.stack([i.dense for i in expected.items]), atol=1e-6)
    assert body["usage"]["tokens"] == expected.tokens
    assert set(body["items"][0]) == {"id", "dense"}  # only the outputs asked for


def test_item_ids_queries_and_instructions(http, engine):
    body = http.post(encode_url(), json={"items": [{"id": "a", "text": "debian"}, "plain string"],
                                         "is_query": True}).json()
    assert [item["id"] for item in body["items"]] == ["a", "1"]
    expected = engine.encode_sync(DEFAULT_MODEL, ["debian", "plain string"], is_query=True)
    np.testing.assert_allclose(dense_of(body), np.stack([i.dense for i in expected.items]), atol=1e-6)


def test_json_and_msgpack_agree(http):
    request = {"items": TEXTS[:4]}
    as_json = http.post(encode_url(), json=request)
    as_msgpack = post_msgpack(http, encode_url(), request)
    assert as_msgpack.headers["Content-Type"].startswith("application/msgpack")
    unpacked = msgpack.unpackb(as_msgpack.content)
    vectors = [decode_tensor(item["dense"]) for item in unpacked["items"]]
    assert all(v.dtype == np.float32 and v.shape == (384,) for v in vectors)
    np.testing.assert_allclose(np.stack(vectors), dense_of(as_json.json()), atol=1e-6)
    assert unpacked["usage"] == as_json.json()["usage"]
    # Accept alone picks the answer's format
    by_accept = http.post(encode_url(), json=request, headers={"Accept": "application/msgpack"})
    assert by_accept.headers["Content-Type"].startswith("application/msgpack")
    json_answer = post_msgpack(http, encode_url(), request, Accept="application/json")
    assert json_answer.headers["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_output_dtypes(http, engine, fmt):
    reference = np.stack([i.dense for i in engine.encode_sync(DEFAULT_MODEL, TEXTS[:3]).items])

    def ask(output_dtype):
        request = {"items": TEXTS[:3], "output_dtype": output_dtype}
        if fmt == "json":
            return http.post(encode_url(), json=request).json()["items"]
        return msgpack.unpackb(post_msgpack(http, encode_url(), request).content)["items"]

    half = ask("float16")
    int8 = ask("int8")
    bits = ask("binary")
    for i, vector in enumerate(reference):
        if fmt == "json":
            h, q, s, b = np.array(half[i]["dense"]), np.array(int8[i]["dense"]["data"]), int8[i]["dense"]["scale"], \
                np.array(bits[i]["dense"])
        else:
            h, b = decode_tensor(half[i]["dense"]), decode_tensor(bits[i]["dense"])
            q, s = decode_tensor(int8[i]["dense"]), int8[i]["dense"]["scale"]
            assert h.dtype == np.float16 and q.dtype == np.int8 and b.dtype == np.uint8
        np.testing.assert_allclose(h, vector, atol=1e-3)
        np.testing.assert_allclose(q * s, vector, atol=s)
        assert np.array_equal(b, np.packbits(vector > 0)) and len(b) == 48


def test_matryoshka_dims_are_renormalised(http, engine):
    body = http.post(encode_url(), json={"items": TEXTS[:2], "dims": 128}).json()
    dense = dense_of(body)
    assert dense.shape == (2, 128)
    np.testing.assert_allclose(np.linalg.norm(dense, axis=1), 1.0, atol=1e-5)
    full = np.stack([i.dense for i in engine.encode_sync(DEFAULT_MODEL, TEXTS[:2]).items])
    truncated = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
    np.testing.assert_allclose(dense, truncated, atol=1e-5)


def test_sparse_over_json_and_msgpack(http, engine):
    texts = ["capital of france", TEXTS[0]]
    expected = engine.encode_sync(SPLADE, texts).items
    as_json = http.post(encode_url(SPLADE), json={"items": texts})
    assert as_json.status_code == 200, as_json.text
    as_msgpack = msgpack.unpackb(post_msgpack(http, encode_url(SPLADE), {"items": texts}).content)
    for want, got_json, got_mp in zip(expected, as_json.json()["items"], as_msgpack["items"]):
        assert got_json["sparse"]["indices"] == want.sparse.indices.tolist()
        np.testing.assert_allclose(got_json["sparse"]["values"], want.sparse.values, atol=1e-6)
        indices, values = decode_tensor(got_mp["sparse"]["indices"]), decode_tensor(got_mp["sparse"]["values"])
        assert indices.dtype == np.int32 and values.dtype == np.float32
        assert np.array_equal(indices, want.sparse.indices)
        np.testing.assert_allclose(values, want.sparse.values, atol=1e-6)


def test_score_equals_the_engine(http, engine):
    query, items = "python package installer", TEXTS[:5]
    expected = engine.score_sync(CROSS, query, items)
    answer = http.post(f"/v1/score/{CROSS}", json={"query": {"text": query}, "items": items})
    assert answer.status_code == 200, answer.text
    scores = answer.json()["scores"]
    assert [s["index"] for s in scores] == [s.index for s in expected.scores]
    assert [s["rank"] for s in scores] == list(range(len(items)))
    np.testing.assert_allclose([s["score"] for s in scores], [s.score for s in expected.scores], atol=1e-5)
    top = msgpack.unpackb(post_msgpack(http, f"/v1/score/{CROSS}",
                                       {"query": query, "items": items, "top_k": 2}).content)
    assert [s["index"] for s in top["scores"]] == [s.index for s in expected.scores[:2]]


def test_local_model_directory_serves_like_its_card(http, engine):
    local = dense_of(http.post(encode_url(LOCAL), json={"items": TEXTS[:3]}).json())
    default = np.stack([i.dense for i in engine.encode_sync(DEFAULT_MODEL, TEXTS[:3]).items])
    np.testing.assert_allclose(local, default, atol=1e-6)


def test_timing_headers_and_request_id(http):
    answer = http.post(encode_url(), json={"items": ["hello"]}, headers={"X-Request-Id": "trace-123"})
    assert answer.headers["X-Request-Id"] == "trace-123"
    for name in ("X-SIE-Queue-Ms", "X-SIE-Tokenize-Ms", "X-SIE-Inference-Ms", "X-SIE-Total-Ms"):
        assert float(answer.headers[name]) >= 0
    assert float(answer.headers["X-SIE-Inference-Ms"]) > 0
    assert float(answer.headers["X-SIE-Total-Ms"]) >= float(answer.headers["X-SIE-Inference-Ms"])
    generated = http.get("/healthz").headers["X-Request-Id"]
    assert len(generated) == 32


# ---- OpenAI compatibility ------------------------------------------------------
def test_official_openai_client(server, engine):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    expected = engine.encode_sync(DEFAULT_MODEL, TEXTS[:3])
    reference = np.stack([i.dense for i in expected.items])

    single = client.embeddings.create(model=DEFAULT_MODEL, input=TEXTS[0])  # the client asks for base64
    np.testing.assert_allclose(single.data[0].embedding, reference[0], atol=1e-6)
    assert single.usage.prompt_tokens == engine.encode_sync(DEFAULT_MODEL, TEXTS[:1]).tokens

    many = client.embeddings.create(model=DEFAULT_MODEL, input=TEXTS[:3], encoding_format="float")
    assert [d.index for d in many.data] == [0, 1, 2] and many.model == DEFAULT_MODEL
    np.testing.assert_allclose([d.embedding for d in many.data], reference, atol=1e-6)
    assert many.usage.prompt_tokens == many.usage.total_tokens == expected.tokens

    # MiniLM has no Matryoshka sizes (tests/server/compat/test_compat_clients.py)
    with pytest.raises(openai.BadRequestError) as cut:
        client.embeddings.create(model=DEFAULT_MODEL, input=TEXTS[:2], dimensions=64)
    assert cut.value.body["param"] == "dimensions"

    assert DEFAULT_MODEL in {m.id for m in client.models.list().data}
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no/such-model", input="x")
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=DEFAULT_MODEL, input=[[101, 2023, 102]])
    assert "token-id" in str(refused.value)


def test_embeddings_raw_base64_and_error_shape(http, engine):
    answer = http.post("/v1/embeddings", json={"model": DEFAULT_MODEL, "input": ["hello"], "encoding_format": "base64"})
    vector = np.frombuffer(base64.b64decode(answer.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, engine.encode_sync(DEFAULT_MODEL, ["hello"]).items[0].dense, atol=1e-6)
    bad = http.post("/v1/embeddings", json={"model": DEFAULT_MODEL, "input": "x", "encoding_format": "hex"})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == "encoding_format"
    assert error["type"] == "invalid_request_error"
    too_wide = http.post("/v1/embeddings", json={"model": DEFAULT_MODEL, "input": "x", "dimensions": 1000})
    assert too_wide.status_code == 400 and too_wide.json()["error"]["param"] == "dimensions"


# ---- batching across requests ------------------------------------------------
async def test_64_concurrent_single_item_requests_share_batches(server, engine):
    texts = [f"{TEXTS[i % len(TEXTS)][:300]} (request {i})" for i in range(64)]
    reference = engine.encode_sync(DEFAULT_MODEL, texts)
    expected = np.stack([i.dense for i in reference.items])
    async with aiohttp.ClientSession(server.url, connector=aiohttp.TCPConnector(limit=100)) as session:
        async def metrics():
            async with session.get("/metrics") as r:
                return await r.text()

        async def one(text):
            async with session.post(encode_url(), json={"items": [text]}) as r:
                assert r.status == 200, await r.text()
                return (await r.json())["items"][0]["dense"]

        before = await metrics()
        vectors = await asyncio.gather(*(one(t) for t in texts))
        after = await metrics()
    np.testing.assert_allclose(np.array(vectors, dtype=np.float32), expected, atol=1e-5)
    batches = metric_value(after, "sie_batches_total", model=DEFAULT_MODEL) - \
        metric_value(before, "sie_batches_total", model=DEFAULT_MODEL)
    items = metric_value(after, "sie_batch_items_sum", model=DEFAULT_MODEL) - \
        metric_value(before, "sie_batch_items_sum", model=DEFAULT_MODEL)
    tokens = metric_value(after, "sie_tokens_processed_total", model=DEFAULT_MODEL) - \
        metric_value(before, "sie_tokens_processed_total", model=DEFAULT_MODEL)
    print(f"64 requests ran in {batches:.0f} batches")
    assert items == 64
    assert batches <= 16, f"64 concurrent requests ran in {batches} batches"
    assert tokens == reference.tokens


async def test_disconnected_client_cancels_its_queued_work(server):
    # 33 x 256 tokens: a full 8192-token batch runs, one item waits for the next batch
    texts = [f"{'packaging tools ' * 200} {i}" for i in range(33)]
    async with aiohttp.ClientSession(server.url) as session:
        async def metrics():
            async with session.get("/metrics") as r:
                return await r.text()

        before = await metrics()
        with pytest.raises(asyncio.TimeoutError):
            async with session.post(encode_url(), json={"items": texts},
                                    timeout=aiohttp.ClientTimeout(total=0.3)) as r:
                await r.read()
        for _ in range(200):  # the running batch finishes; the queued one is dropped
            after = await metrics()
            if metric_value(after, "sie_inflight_requests") == 0 and \
                    metric_value(after, "sie_queued_tokens", model=DEFAULT_MODEL) == 0:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        after = await metrics()
    processed = metric_value(after, "sie_tokens_processed_total", model=DEFAULT_MODEL) - \
        metric_value(before, "sie_tokens_processed_total", model=DEFAULT_MODEL)
    assert metric_value(after, "sie_inflight_requests") == 0
    assert metric_value(after, "sie_requests_total", route="encode", status="499") >= 1
    assert processed < 33 * 256, "the disconnected request's queued batch still ran"


# ---- errors --------------------------------------------------------------------
LONG = "word " * 400
ERRORS = [
    # (name, method, path, body (dict, bytes or None), headers, status, code)
    ("empty items", "POST", encode_url(), {"items": []}, {}, 400, "invalid_request"),
    ("missing items", "POST", encode_url(), {"output_types": ["dense"]}, {}, 400, "invalid_request"),
    ("items not a list", "POST", encode_url(), {"items": "text"}, {}, 400, "invalid_request"),
    ("non-string text", "POST", encode_url(), {"items": [{"text": 5}]}, {}, 400, "invalid_request"),
    ("unknown item field", "POST", encode_url(), {"items": [{"text": "a", "body": "b"}]}, {}, 400, "invalid_request"),
    ("unknown output type", "POST", encode_url(), {"items": ["a"], "output_types": ["colour"]}, {}, 400,
     "invalid_request"),
    ("output the model lacks", "POST", encode_url(), {"items": ["a"], "output_types": ["sparse"]}, {}, 400,
     "unsupported_output"),
    ("unknown output dtype", "POST", encode_url(), {"items": ["a"], "output_dtype": "int4"}, {}, 400,
     "invalid_request"),
    ("dims too large", "POST", encode_url(), {"items": ["a"], "dims": 1000}, {}, 400, "invalid_request"),
    ("dims not an int", "POST", encode_url(), {"items": ["a"], "dims": True}, {}, 400, "invalid_request"),
    ("is_query not a bool", "POST", encode_url(), {"items": ["a"], "is_query": "yes"}, {}, 400, "invalid_request"),
    ("unknown field", "POST", encode_url(), {"items": ["a"], "normalise": True}, {}, 400, "invalid_request"),
    ("too long without truncation", "POST", encode_url(), {"items": [LONG], "truncate": False}, {}, 400,
     "invalid_request"),
    ("too many items", "POST", encode_url(), {"items": ["a"] * (MAX_ITEMS + 1)}, {}, 413, "payload_too_large"),
    ("text too long", "POST", encode_url(), {"items": ["a" * 300_000]}, {}, 413, "payload_too_large"),
    ("body too large", "POST", encode_url(), {"items": ["a" * 200_000] * 6}, {}, 413, "payload_too_large"),
    ("malformed JSON", "POST", encode_url(), b'{"items": [', {}, 400, "invalid_request"),
    ("empty body", "POST", encode_url(), b"", {}, 400, "invalid_request"),
    ("body not an object", "POST", encode_url(), b'["a"]', {}, 400, "invalid_request"),
    ("malformed msgpack", "POST", encode_url(), b"\xc1\xff", {"Content-Type": "application/msgpack"}, 400,
     "invalid_request"),
    ("bad timeout header", "POST", encode_url(), {"items": ["a"]}, {"X-SIE-Timeout-Ms": "soon"}, 400,
     "invalid_request"),
    ("deadline passed", "POST", encode_url(), {"items": ["a"]}, {"X-SIE-Timeout-Ms": "0.001"}, 504,
     "deadline_exceeded"),
    ("unknown model", "POST", encode_url("nobody/nothing"), {"items": ["a"]}, {}, 404, "model_not_found"),
    ("score on an encoder", "POST", f"/v1/score/{DEFAULT_MODEL}", {"query": "q", "items": ["a"]}, {}, 400,
     "unsupported_task"),
    ("extract on an encoder", "POST", f"/v1/extract/{DEFAULT_MODEL}", {"items": ["a"], "labels": ["x"]}, {}, 400,
     "unsupported_task"),
    ("score without query", "POST", f"/v1/score/{CROSS}", {"items": ["a"]}, {}, 400, "invalid_request"),
    ("score bad top_k", "POST", f"/v1/score/{CROSS}", {"query": "q", "items": ["a"], "top_k": 0}, {}, 400,
     "invalid_request"),
    ("unknown route", "GET", "/v2/things", None, {}, 404, "not_found"),
    ("wrong method", "GET", encode_url(), None, {}, 405, "method_not_allowed"),
    ("embeddings without input", "POST", "/v1/embeddings", {"model": DEFAULT_MODEL}, {}, 400, "invalid_request"),
    ("embeddings empty input", "POST", "/v1/embeddings", {"model": DEFAULT_MODEL, "input": []}, {}, 400,
     "invalid_request"),
    ("embeddings unknown model", "POST", "/v1/embeddings", {"model": "x/y", "input": "a"}, {}, 404, "model_not_found"),
]


@pytest.mark.parametrize("name,method,path,body,headers,status,code", ERRORS, ids=[e[0] for e in ERRORS])
def test_error_answers(http, name, method, path, body, headers, status, code):
    if isinstance(body, dict):
        answer = http.request(method, path, json=body, headers=headers)
    else:
        answer = http.request(method, path, content=body, headers=headers)
    assert answer.status_code == status, answer.text
    if answer.headers["Content-Type"].startswith("application/msgpack"):  # errors follow the request's format
        error = msgpack.unpackb(answer.content)["error"]
    else:
        error = answer.json()["error"]
    assert error["code"] == code
    assert error["message"]


def test_fuzzed_bodies_never_cause_a_server_error(http):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers(-5, 5000) | st.floats(allow_nan=False) | st.text(max_size=20)
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["text", "id", "items", "dims", "output_types", "x"]), inner, max_size=3), max_leaves=8)
    bodies = st.dictionaries(st.sampled_from(["items", "output_types", "is_query", "instruction", "dims", "normalize",
                                              "output_dtype", "truncate", "query", "top_k", "labels"]), values,
                             max_size=4)

    openai_bodies = st.fixed_dictionaries({"model": st.sampled_from([DEFAULT_MODEL, "x/y", 5])}, optional={
        "input": values, "encoding_format": values, "dimensions": values, "user": values})

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body=bodies, openai_body=openai_bodies, route=st.sampled_from(["encode", "score", "embeddings"]))
    def check(body, openai_body, route):
        if route == "embeddings":
            answer = http.post("/v1/embeddings", content=json.dumps(openai_body))
        else:
            answer = http.post(f"/v1/{route}/{DEFAULT_MODEL if route == 'encode' else CROSS}", content=json.dumps(body))
        assert answer.status_code < 500, (body, openai_body, answer.text)

    check()
