"""Fixed-label classifiers over HTTP, against a real `sie-server serve` with two tiny random
classifiers (a single-label BERT served from its directory, a multi-label one from a card), each
answer equal to transformers' `pipeline("text-classification")` on the same weights (1e-5):

- SIE's `/v1/extract` (labels left out; `top_k: null` every label) and the typed client;
- TEI's `/predict` (a text, a batch of [text], raw_scores, truncate) and root route, answers valid
  under TEI's own OpenAPI document (fixtures/tei-openapi.json);
- Infinity's `/classify` (its request and answer shapes);
- Hugging Face's `InferenceClient.text_classification` (the real huggingface_hub client)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import pytest
import yaml

from fixed_label_models import TEXTS, bert, bert_multi, pipeline_of
from server_fixtures import start_server

SINGLE = "test/sentiment"
MULTI = "test/emotions"
ATOL = 1e-5
TEI_OPENAPI = json.loads((Path(__file__).parent / "fixtures" / "tei-openapi.json").read_text())


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("compat-classify")
    return {SINGLE: bert(base / "single"), MULTI: bert_multi(base / "multi")}


@pytest.fixture(scope="module")
def pipelines(roots):
    return {model: pipeline_of(root) for model, root in roots.items()}


@pytest.fixture(scope="module")
def server(roots, tmp_path_factory):
    base = tmp_path_factory.mktemp("compat-classify-server")
    cards = base / "cards"
    cards.mkdir()
    (cards / "multi.yaml").write_text(yaml.safe_dump({
        "id": MULTI, "weights": {"path": str(roots[MULTI])}, "outputs": ["classifier"], "max_seq_len": 64,
        "max_batch_tokens": 1024}))
    process = start_server("--model", f"{SINGLE}={roots[SINGLE]}", "--models", str(cards), "--no-builtin",
                           "--device", "cpu", log_dir=base)
    try:
        yield process
    finally:
        process.stop()


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def assert_like(got: list[dict], want: list[dict]) -> None:
    """Same labels in the same order (best first), scores to ATOL."""
    assert [g["label"] for g in got] == [w["label"] for w in want]
    assert [g["score"] for g in got] == pytest.approx([w["score"] for w in want], abs=ATOL)


def tei_valid(answer, schema: str) -> None:
    jsonschema.validate(answer, {**TEI_OPENAPI["components"]["schemas"][schema],
                                 "components": TEI_OPENAPI["components"]})


@pytest.mark.parametrize("model", [SINGLE, MULTI])
def test_extract_answers_the_models_own_labels(server, pipelines, model):
    every = post(server, f"/v1/extract/{model}", {"items": TEXTS, "top_k": None})
    assert every.status_code == 200, every.text
    for item, want in zip(every.json()["items"], pipelines[model](TEXTS, top_k=None)):
        assert_like(item["classifications"], want)
    best = post(server, f"/v1/extract/{model}", {"items": TEXTS}).json()["items"]
    for item, want in zip(best, pipelines[model](TEXTS)):
        assert_like(item["classifications"], [want])
    refused = post(server, f"/v1/extract/{model}", {"items": TEXTS, "labels": ["joy"]})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "labels"
    assert "own labels" in refused.json()["error"]["message"]


def test_the_typed_client(server, pipelines):
    from sie_client import SIEClient

    with SIEClient(server.url) as client:
        result = client.extract(MULTI, TEXTS, top_k=2)
        raw = client.extract(MULTI, TEXTS[:1], top_k=8, raw_scores=True)
    for item, want in zip(result.items, pipelines[MULTI](TEXTS, top_k=2)):
        assert_like([{"label": c.label, "score": c.score} for c in item.classifications], want)
    assert_like([{"label": c.label, "score": c.score} for c in raw.items[0].classifications],
                pipelines[MULTI](TEXTS[:1], top_k=None, function_to_apply="none")[0])


@pytest.mark.parametrize("model", [SINGLE, MULTI])
def test_tei_predict(server, pipelines, model):
    one = post(server, f"/tei/{model}/predict", {"inputs": TEXTS[0]})
    assert one.status_code == 200, one.text
    tei_valid(one.json(), "PredictResponse")
    assert_like(one.json(), pipelines[model](TEXTS[0], top_k=None))
    batch = post(server, f"/tei/{model}/predict", {"inputs": [[t] for t in TEXTS]})
    tei_valid(batch.json(), "PredictResponse")
    for got, want in zip(batch.json(), pipelines[model](TEXTS, top_k=None)):
        assert_like(got, want)
    raw = post(server, f"/tei/{model}/predict", {"inputs": TEXTS[1], "raw_scores": True}).json()
    assert_like(raw, pipelines[model](TEXTS[1], top_k=None, function_to_apply="none"))
    root = post(server, f"/tei/{model}", {"inputs": TEXTS[2]})
    assert root.status_code == 200 and root.json() == post(server, f"/tei/{model}/predict",
                                                           {"inputs": TEXTS[2]}).json()


def test_tei_predict_refusals_and_pairs(server):
    too_long = post(server, f"/tei/{MULTI}/predict", {"inputs": "word " * 200, "truncate": False})
    assert too_long.status_code == 422 and too_long.json()["error_type"] == "Validation"
    assert "window" in too_long.json()["error"]
    assert post(server, f"/tei/{MULTI}/predict", {"inputs": "word " * 200}).status_code == 200  # TEI's auto-truncate
    pair = post(server, f"/tei/{MULTI}/predict", {"inputs": ["a", "b"]})
    assert pair.status_code == 422 and "single texts" in pair.json()["error"]
    assert post(server, f"/tei/{MULTI}/predict", {"inputs": ""}).json()["error_type"] == "Empty"
    # the directory's card also has its score head: a pair is scored with its one-label reranker answer
    scored = post(server, f"/tei/{SINGLE}/predict", {"inputs": ["capital of France", "Paris"]})
    assert scored.status_code == 200 and scored.json()[0]["label"] == "LABEL_0"


def test_infinity_classify(server, pipelines):
    answer = post(server, "/classify", {"model": MULTI, "input": TEXTS})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "classify" and body["model"] == MULTI and body["usage"]["total_tokens"] > 0
    assert body["id"].startswith("infinity-") and isinstance(body["created"], int)
    for got, want in zip(body["data"], pipelines[MULTI](TEXTS, top_k=None)):
        assert_like(got, want)
    raw = post(server, "/classify", {"model": SINGLE, "input": TEXTS[:1], "raw_scores": True}).json()
    assert_like(raw["data"][0], pipelines[SINGLE](TEXTS[:1], top_k=None, function_to_apply="none")[0])
    models = httpx.get(server.url + "/models", timeout=10).json()["data"]
    assert {m["id"]: "classify" in m["capabilities"] for m in models} == {SINGLE: True, MULTI: True}
    missing = post(server, "/classify", {"input": TEXTS})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"


@pytest.fixture
def online(monkeypatch):
    """The suite runs with HF_HUB_OFFLINE=1 (no hub downloads), which also blocks requests to a local URL."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.mark.parametrize("model", [SINGLE, MULTI])
def test_hugging_face_text_classification(server, pipelines, online, model):
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    client = InferenceClient(base_url=f"{server.url}/hf/{model}")

    def pairs(elements):
        return [{"label": e.label, "score": e.score} for e in elements]

    assert_like(pairs(client.text_classification(TEXTS[0])), [pipelines[model](TEXTS[0])[0]])
    assert_like(pairs(client.text_classification(TEXTS[0], top_k=3)), pipelines[model](TEXTS[0], top_k=3))
    for function in ("sigmoid", "softmax", "none"):
        assert_like(pairs(client.text_classification(TEXTS[1], top_k=4, function_to_apply=function)),
                    pipelines[model](TEXTS[1], top_k=4, function_to_apply=function))
    with pytest.raises(HfHubHTTPError, match="own labels"):
        InferenceClient(base_url=f"{server.url}/hf/{model}?labels=a,b").text_classification(TEXTS[0])
