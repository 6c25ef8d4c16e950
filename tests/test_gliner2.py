"""GLiNER2 (span architecture) entities and classification in one pass, against the `gliner2`
library's `extract` on the same weights: a GLiNER2 built with its own classes on a tiny random
DeBERTa-v3 backbone, its heads re-drawn so probabilities spread, the count head set to one
instance (a random one may say none), saved with save_pretrained; SIE serves the directory."""

from __future__ import annotations

import math

import httpx
import msgpack
import numpy as np
import pytest
import torch

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest
from sie_server.launch import start_server
from test_gliner_deberta import tiny_deberta

LABELS = ["person", "location", "organization"]
TASK, CLASSES = "topic", ["politics", "sports", "technology"]
TEXTS = [
    "Barack Obama was born in Hawaii and worked with Google in Mountain View",
    "Ada Lovelace met Charles Babbage in London!",
    "Linus wrote Linux at the University of Helsinki; Zürich-based café owners use it.",
]


def build_reference(dest, backbone, seed: int):
    from gliner2 import AutoExtractor
    from gliner2.configuration import ExtractorConfig

    torch.manual_seed(seed)
    model = AutoExtractor.from_config(ExtractorConfig(model_name=str(backbone), architecture="span", max_width=6))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.startswith("encoder."):
                scale = 1.0 / math.sqrt(param.shape[1]) if param.dim() >= 2 else 0.1
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
        model.count_pred[2].bias[1] += 50.0  # one instance, so entities are decoded
        found = reference_answer(model, TEXTS[0], 0.0)["entities"]
        scores = np.clip([e["confidence"] for spans in found.values() for e in spans], 1e-7, 1 - 1e-7)
        alpha = 3.0 / np.log(scores / (1 - scores)).std()  # logits with a spread of about 3
        model.count_embed.projector[2].weight.mul_(alpha)
        model.count_embed.projector[2].bias.mul_(alpha)
        model.classifier[2].weight.mul_(5.0)
    model.save_pretrained(str(dest))
    return model


def reference_answer(model, text, threshold, multi_label=False):
    schema = model.create_schema().entities(LABELS).classification(TASK, CLASSES, multi_label=multi_label)
    return model.extract(text, schema, threshold=threshold, include_confidence=True, include_spans=True)


def reference_entities(answer, text):
    """The library's entities as SIE lists them: label by label; spans only in the appended "." left out."""
    return [(e["start"], min(e["end"], len(text)), label, e["confidence"])
            for label, spans in answer["entities"].items() for e in spans if e["start"] < len(text)]


def assert_same(item, answer, text):
    expected = reference_entities(answer, text)
    assert [(e.start, e.end, e.label) for e in item.entities] == [x[:3] for x in expected]
    np.testing.assert_allclose([e.score for e in item.entities], [x[3] for x in expected], atol=1e-5)
    best = item.classifications[0]
    assert best.label == answer[TASK]["label"] and abs(best.score - answer[TASK]["confidence"]) < 1e-5


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gliner2")
    root = tmp / "gliner2"
    reference = build_reference(root, tiny_deberta("v3", tmp / "backbone", seed=2), seed=3)
    card = ModelCard(id="gliner2/tiny", weights=WeightsSource(path=str(root)), outputs=("gliner2",), max_seq_len=128)
    with Engine(Catalog([card]), device="cpu") as engine:
        yield tmp, root, reference, engine


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_entities_and_classification_equal_the_library(built, threshold):
    _, _, reference, engine = built
    classify = {"task": TASK, "labels": CLASSES}
    result = engine.extract_sync("gliner2/tiny", TEXTS, LABELS, threshold=threshold, classify=classify)
    total = 0
    for text, item in zip(TEXTS, result.items):
        answer = reference_answer(reference, text, threshold)
        assert_same(item, answer, text)
        assert abs(sum(c.score for c in item.classifications) - 1.0) < 1e-6
        total += len(item.entities)
    assert total >= 5 and result.tokens > 0


def test_multi_label_and_batch_invariance(built):
    _, _, reference, engine = built
    classify = {"task": TASK, "labels": CLASSES, "multi_label": True}
    together = engine.extract_sync("gliner2/tiny", TEXTS, LABELS, classify=classify).items
    for text, batched in zip(TEXTS, together):
        alone = engine.extract_sync("gliner2/tiny", [text], LABELS, classify=classify).items[0]
        assert [(e.start, e.end, e.label) for e in alone.entities] == \
            [(e.start, e.end, e.label) for e in batched.entities]
        np.testing.assert_allclose([c.score for c in alone.classifications],
                                   [c.score for c in batched.classifications], atol=1e-6)
        answer = reference_answer(reference, text, 0.5, multi_label=True)
        chosen = [c for c in batched.classifications if c.score >= 0.5] or batched.classifications[:1]
        assert sorted((c.label, round(c.score, 5)) for c in chosen) == \
            sorted((x["label"], round(x["confidence"], 5)) for x in answer[TASK])


@pytest.mark.parametrize("fields, where", [
    (dict(classify={"task": TASK}), "classify.labels"),
    (dict(classify={"labels": CLASSES}), "classify.task"),
    (dict(classify={"task": TASK, "labels": CLASSES, "top": 1}), "classify"),
    (dict(flat=False), "flat"),
])
def test_bad_requests(built, fields, where):
    _, _, _, engine = built
    with pytest.raises(InvalidRequest) as caught:
        engine.extract_sync("gliner2/tiny", TEXTS[:1], LABELS, **fields)
    assert where in str(caught.value)


def test_http_and_client(built):
    from sie_client import SIEClient

    tmp, root, reference, _ = built
    server = start_server("--model", f"g2={root}", log_dir=tmp)
    try:
        body = {"items": TEXTS, "labels": LABELS, "classify": {"task": TASK, "labels": CLASSES}}
        answers = [httpx.post(f"{server.url}/v1/extract/g2", json=body, timeout=60).json(),
                   msgpack.unpackb(httpx.post(f"{server.url}/v1/extract/g2", content=msgpack.packb(body),
                                              headers={"Content-Type": "application/msgpack"}, timeout=60).content)]
        for data in answers:
            for text, item in zip(TEXTS, data["items"]):
                expected = reference_entities(reference_answer(reference, text, 0.5), text)
                assert [(e["start"], e["end"], e["label"]) for e in item["entities"]] == [x[:3] for x in expected]
                assert item["classifications"][0]["label"] == reference_answer(reference, text, 0.5)[TASK]["label"]
        with SIEClient(server.url) as client:
            result = client.extract("g2", TEXTS, LABELS, classify={"task": TASK, "labels": CLASSES})
            for text, item in zip(TEXTS, result.items):
                assert_same(item, reference_answer(reference, text, 0.5), text)
        bad = httpx.post(f"{server.url}/v1/extract/g2", json={**body, "classify": {"task": TASK}}, timeout=30)
        assert bad.status_code == 400 and "classify.labels" in bad.json()["error"]["message"]
        # embedded: the same client API in-process, the directory served without a card
        with SIEClient("embedded", local_models={"local/g2": str(root)}) as embedded:
            result = embedded.extract("local/g2", TEXTS[:1], LABELS, classify={"task": TASK, "labels": CLASSES})
            assert_same(result.items[0], reference_answer(reference, TEXTS[0], 0.5), TEXTS[0])
    finally:
        server.stop()
