"""Over HTTP on a real `sie-server serve`: `/v1/score` reranks with a cross-encoder and
with late interaction, `/v1/encode` returns sparse and multivector outputs (JSON and
msgpack), and bad requests get 4xx answers that name the problem.

Models: a random classification head on the real MiniLM backbone and a tiny ColBERT
(user cards from `--models DIR`), and the built-in SPLADE-tiny card (real weights)."""

from __future__ import annotations

import json

import httpx
import msgpack
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from server_fixtures import start_server
from tiny_models import MINILM_DIR, save_tiny, tiny_bert_config

QUERY = "how do I install a python package"
DOCS = ["pip installs Python packages from PyPI.", "A library for PNG images.", "Football is a sport.",
        "apt installs Debian packages, python3-pip among them."]
COLBERT = {"kind": "colbert", "query_marker": "[unused0]", "document_marker": "[unused1]", "query_length": 16,
           "expand_queries": True, "skiplist": "punctuation"}


def _cross_encoder(dest):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    return save_tiny(BertForSequenceClassification.from_pretrained(str(MINILM_DIR), num_labels=1).eval(), dest)


def _colbert(dest):
    from transformers import BertModel

    torch.manual_seed(1)
    root = save_tiny(BertModel(tiny_bert_config(), add_pooling_layer=False).eval(), dest)
    weights = {f"bert.{k}": v for k, v in load_file(str(root / "model.safetensors")).items()}
    weights["linear.weight"] = torch.randn(16, 32) * 0.2
    save_file(weights, str(root / "model.safetensors"))
    return root


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("http-models")
    return {"ce": _cross_encoder(base / "ce"), "colbert": _colbert(base / "colbert")}


@pytest.fixture(scope="module")
def server(roots, tmp_path_factory):
    cards = tmp_path_factory.mktemp("cards")
    (cards / "ce.yaml").write_text(json.dumps({
        "id": "test/cross-encoder", "weights": {"path": str(roots["ce"])}, "outputs": ["score"], "max_seq_len": 128,
        "max_batch_tokens": 2048}))
    (cards / "colbert.yaml").write_text(json.dumps({
        "id": "test/colbert", "weights": {"path": str(roots["colbert"])}, "outputs": ["multivector"],
        "max_seq_len": 64, "max_batch_tokens": 2048, "options": {"multivector": COLBERT}}))
    process = start_server("--models", str(cards), "--preload", "test/cross-encoder", "--device", "cpu",
                           log_dir=tmp_path_factory.mktemp("log"))
    try:
        yield process
    finally:
        process.stop()


def post(server, route: str, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.url}{route}", json=body, timeout=60, **kwargs)


def test_score_reranks_with_the_cross_encoder(server, roots):
    from sentence_transformers import CrossEncoder

    answer = post(server, "/v1/score/test/cross-encoder",
                  {"query": {"text": QUERY}, "items": [{"id": f"d{i}", "text": t} for i, t in enumerate(DOCS)]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = CrossEncoder(str(roots["ce"]), device="cpu").predict([(QUERY, d) for d in DOCS])
    assert body["model"] == "test/cross-encoder" and body["usage"]["tokens"] > 0
    assert [s["rank"] for s in body["scores"]] == list(range(len(DOCS)))
    assert [s["index"] for s in body["scores"]] == list(np.argsort(-expected, kind="stable"))
    for s in body["scores"]:
        assert s["id"] == f"d{s['index']}"
        assert abs(s["score"] - float(expected[s["index"]])) < 1e-5
    top = post(server, "/v1/score/test/cross-encoder", {"query": {"text": QUERY}, "items": DOCS, "top_k": 2}).json()
    assert [s["index"] for s in top["scores"]] == [s["index"] for s in body["scores"][:2]]


def test_encode_returns_multivector_and_score_is_its_maxsim(server):
    route = "/v1/encode/test/colbert"
    docs = post(server, route, {"items": DOCS, "output_types": ["multivector"]}).json()
    query = post(server, route, {"items": [QUERY], "is_query": True}).json()
    q = np.asarray(query["items"][0]["multivector"], dtype=np.float32)
    assert q.shape == (16, 16)  # expanded to the query length, 16 dims
    expected = [float((q @ np.asarray(item["multivector"], dtype=np.float32).T).max(axis=1).sum())
                for item in docs["items"]]
    scored = post(server, "/v1/score/test/colbert", {"query": {"text": QUERY}, "items": DOCS})
    assert scored.status_code == 200, scored.text
    got = {s["index"]: s["score"] for s in scored.json()["scores"]}
    np.testing.assert_allclose([got[i] for i in range(len(DOCS))], expected, atol=1e-4)

    packed = httpx.post(f"{server.url}{route}", content=msgpack.packb({"items": DOCS[:1]}),
                        headers={"Content-Type": "application/msgpack"}, timeout=60)
    tensor = msgpack.unpackb(packed.content)["items"][0]["multivector"]
    matrix = np.frombuffer(tensor["data"], dtype=tensor["dtype"]).reshape(tensor["shape"])
    np.testing.assert_allclose(matrix, np.asarray(docs["items"][0]["multivector"]), atol=1e-6)


def test_encode_returns_sparse_from_the_builtin_splade(server):
    from sentence_transformers import SparseEncoder
    from test_heads_sparse import SPLADE_DIR

    answer = post(server, "/v1/encode/sie/splade-tiny", {"items": ["capital of france"], "output_types": ["sparse"]})
    assert answer.status_code == 200, answer.text
    sparse = answer.json()["items"][0]["sparse"]
    reference = SparseEncoder(str(SPLADE_DIR), device="cpu")
    row = reference.encode(["capital of france"], convert_to_tensor=True).to_dense().numpy()[0]
    row[sorted(reference.tokenizer.all_special_ids)] = 0.0
    np.testing.assert_array_equal(sparse["indices"], np.nonzero(row > 0)[0])
    np.testing.assert_allclose(sparse["values"], row[row > 0], atol=1e-4)


@pytest.mark.parametrize("route, body, status, code", [
    ("/v1/score/test/cross-encoder", {"query": {"text": 7}, "items": DOCS}, 400, "invalid_request"),
    ("/v1/score/test/cross-encoder", {"query": {"text": QUERY}, "items": []}, 400, "invalid_request"),
    ("/v1/score/test/cross-encoder", {"query": {"text": QUERY}, "items": DOCS, "top_k": 0}, 400, "invalid_request"),
    ("/v1/score/test/cross-encoder", {"query": QUERY}, 400, "invalid_request"),
    ("/v1/encode/test/cross-encoder", {"items": DOCS}, 400, "unsupported_task"),
    ("/v1/score/sie/splade-tiny", {"query": {"text": QUERY}, "items": DOCS}, 400, "unsupported_task"),
    ("/v1/encode/test/colbert", {"items": DOCS, "output_types": ["sparse"]}, 400, "unsupported_output"),
    ("/v1/score/no/such-model", {"query": {"text": QUERY}, "items": DOCS}, 404, "model_not_found"),
])
def test_bad_requests_are_4xx(server, route, body, status, code):
    answer = post(server, route, body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert answer.json()["error"]["message"]
