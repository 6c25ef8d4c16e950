"""`POST /v1/extract/{model}` on a real `sie-server`, serving a GLiNER directory both by
`--model NAME=PATH` and through a card in a `--models` directory; answers are compared
with the gliner library's `predict_entities` on the same weights."""

from __future__ import annotations

import httpx
import pytest
import yaml
from test_gliner_extract import LABELS, TEXTS, build_reference

from server_fixtures import start_server
from tiny_models import make_tiny_bert


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gliner-http")
    root = tmp / "gliner"
    reference = build_reference(root, make_tiny_bert(tmp / "backbone", seed=5), seed=11, hidden_size=32, max_width=6)
    cards = tmp / "cards"
    cards.mkdir()
    (cards / "gliner.yaml").write_text(yaml.safe_dump({
        "id": "test/gliner-card", "weights": {"path": str(root)}, "outputs": ["extract"], "max_seq_len": 48,
    }))
    server = start_server("--model", f"gl={root}", "--models", str(cards), log_dir=tmp)
    try:
        yield server, reference
    finally:
        server.stop()


@pytest.mark.parametrize("model", ["gl", "test/gliner-card"])
def test_extract_matches_predict_entities(served, model):
    server, reference = served
    body = {"items": [{"id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)], "labels": LABELS,
            "threshold": 0.4, "flat": False}
    answer = httpx.post(f"{server.url}/v1/extract/{model}", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["model"] == model and data["usage"]["tokens"] > 0
    total = 0
    for i, (text, item) in enumerate(zip(TEXTS, data["items"])):
        assert item["id"] == f"t{i}"
        expected = reference.predict_entities(text, LABELS, flat_ner=False, threshold=0.4)
        assert [(e["start"], e["end"], e["text"], e["label"]) for e in item["entities"]] == \
            [(e["start"], e["end"], e["text"], e["label"]) for e in expected]
        assert all(abs(a["score"] - b["score"]) < 1e-4 for a, b in zip(item["entities"], expected))
        total += len(expected)
    assert total >= 5


def test_multi_label_option_and_model_listing(served):
    server, reference = served
    body = {"items": [TEXTS[0]], "labels": LABELS, "multi_label": True}
    answer = httpx.post(f"{server.url}/v1/extract/gl", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    expected = reference.predict_entities(TEXTS[0], LABELS, multi_label=True)
    assert [(e["start"], e["label"]) for e in answer.json()["items"][0]["entities"]] == \
        [(e["start"], e["label"]) for e in expected]
    info = httpx.get(f"{server.url}/v1/models/gl", timeout=10).json()
    assert info["tasks"] == ["extract"]


@pytest.mark.parametrize("body, where", [
    ({"items": ["Ada Lovelace"], "labels": []}, "labels"),
    ({"items": ["Ada Lovelace"], "labels": ["person", 7]}, "labels[1]"),
    ({"items": ["Ada Lovelace"], "labels": ["person"], "threshold": 2}, "threshold"),
    ({"items": ["Ada Lovelace"], "labels": ["person"], "nested": True}, "nested"),
    ({"items": ["Ada Lovelace"]}, "labels"),
    # image items are a detector's (OWLv2: tests/server/test_detect_http.py); a GLiNER model refuses them by name
    ({"items": ["Ada Lovelace", {"image": "iVBORw0KGgo="}], "labels": ["person"]}, "items[1] is an image"),
])
def test_bad_extract_requests_are_400(served, body, where):
    server, _ = served
    answer = httpx.post(f"{server.url}/v1/extract/gl", json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and where in error["message"]


def test_long_labels_on_a_small_window_are_400(served):
    server, _ = served
    body = {"items": ["Ada Lovelace lived in London."], "labels": [f"a rather long label number {i}" for i in range(8)]}
    answer = httpx.post(f"{server.url}/v1/extract/test/gliner-card", json=body, timeout=30)
    assert answer.status_code == 400 and "fewer or shorter labels" in answer.json()["error"]["message"]
