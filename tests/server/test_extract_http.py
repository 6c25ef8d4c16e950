"""`POST /v1/extract/{model}` on a real `sie-server`, serving a GLiNER directory both by
`--model NAME=PATH` and through a card in a `--models` directory, and a GLiNER bi-encoder;
answers are compared with the gliner library's `predict_entities` on the same weights (and,
for the bi-encoder, JSON and msgpack with SIE's engine in-process)."""

from __future__ import annotations

import httpx
import msgpack
import pytest
import yaml
from test_gliner_bi import build_bi_encoder
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
    bi_root, bi_reference = build_bi_encoder(tmp, "bert", seed=4)
    server = start_server("--model", f"gl={root}", "--model", f"glbi={bi_root}", "--models", str(cards), log_dir=tmp)
    try:
        yield server, reference, (bi_root, bi_reference)
    finally:
        server.stop()


@pytest.mark.parametrize("model", ["gl", "test/gliner-card"])
def test_extract_matches_predict_entities(served, model):
    server, reference, _ = served
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
    server, reference, _ = served
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
    server, _, _ = served
    answer = httpx.post(f"{server.url}/v1/extract/gl", json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and where in error["message"]


def test_long_labels_on_a_small_window_are_400(served):
    server, _, _ = served
    body = {"items": ["Ada Lovelace lived in London."], "labels": [f"a rather long label number {i}" for i in range(8)]}
    answer = httpx.post(f"{server.url}/v1/extract/test/gliner-card", json=body, timeout=30)
    assert answer.status_code == 400 and "fewer or shorter labels" in answer.json()["error"]["message"]


def test_bi_encoder_json_and_msgpack_equal_the_engine_and_gliner(served):
    """A bi-encoder (labels through their own encoder, cached) over HTTP: JSON and msgpack answers equal
    SIE's engine on the same directory in-process, and gliner's predict_entities."""
    from sie_engine import Catalog, Engine, ModelCard, WeightsSource

    server, _, (root, reference) = served
    body = {"items": [{"id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)], "labels": LABELS, "threshold": 0.4}
    as_json = httpx.post(f"{server.url}/v1/extract/glbi", json=body, timeout=60)
    assert as_json.status_code == 200, as_json.text
    as_msgpack = httpx.post(f"{server.url}/v1/extract/glbi", content=msgpack.packb(body, use_bin_type=True),
                            headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
                            timeout=60)
    assert as_msgpack.status_code == 200, as_msgpack.text
    card = ModelCard(id="glbi", weights=WeightsSource(path=str(root)), outputs=("extract",))
    with Engine(Catalog([card]), device="cpu") as engine:
        ours = engine.extract_sync("glbi", TEXTS, LABELS, threshold=0.4)

    def rows(items):
        return [[(e["start"], e["end"], e["text"], e["label"], e["score"]) for e in item["entities"]] for item in items]

    engine_rows = [[(e.start, e.end, e.text, e.label, e.score) for e in item.entities] for item in ours.items]
    for answer in (as_json.json(), msgpack.unpackb(as_msgpack.content, raw=False)):
        assert [item["id"] for item in answer["items"]] == [f"t{i}" for i in range(len(TEXTS))]
        for served_row, engine_row in zip(rows(answer["items"]), engine_rows, strict=True):
            assert [r[:4] for r in served_row] == [r[:4] for r in engine_row]
            assert all(abs(a[4] - b[4]) < 1e-6 for a, b in zip(served_row, engine_row))
    expected = [reference.predict_entities(text, LABELS, threshold=0.4) for text in TEXTS]
    assert [[r[:4] for r in row] for row in engine_rows] == \
        [[(e["start"], e["end"], e["text"], e["label"]) for e in found] for found in expected]
    assert sum(len(row) for row in engine_rows) >= 5


@pytest.mark.parametrize("body, where", [
    ({"items": ["Ada Lovelace"], "labels": []}, "labels"),
    ({"items": ["Ada Lovelace"], "labels": ["person", ""]}, "labels[1]"),
    ({"items": ["Ada Lovelace"], "labels": ["person"], "threshold": -1}, "threshold"),
])
def test_bad_bi_encoder_requests_are_400(served, body, where):
    server, _, _ = served
    answer = httpx.post(f"{server.url}/v1/extract/glbi", json=body, timeout=30)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and where in error["message"]
