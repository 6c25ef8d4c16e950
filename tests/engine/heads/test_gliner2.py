"""GLiNER2 (span architecture) entities, relations and classification in one pass, against the
`gliner2` library's `extract` on the same weights: a GLiNER2 built with its own classes on a tiny
random DeBERTa-v3 backbone, its heads re-drawn so probabilities spread, the count head set to two
instances (a random one may say none; entities read the first, relations both), saved with
save_pretrained; SIE serves the directory."""

from __future__ import annotations

import math

import httpx
import msgpack
import numpy as np
import pytest
import torch
from test_gliner_deberta import tiny_deberta

from server_fixtures import start_server
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest

LABELS = ["person", "location", "organization"]
TASK, CLASSES = "topic", ["politics", "sports", "technology"]
RELATIONS = ["works_for", "born_in"]
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
        model.count_pred[2].bias[2] += 50.0  # two instances: entities are decoded, relations run two GRU steps
        found = reference_answer(model, TEXTS[0], 0.0)["entities"]
        scores = np.clip([e["confidence"] for spans in found.values() for e in spans], 1e-7, 1 - 1e-7)
        alpha = 3.0 / np.log(scores / (1 - scores)).std()  # logits with a spread of about 3
        model.count_embed.projector[2].weight.mul_(alpha)
        model.count_embed.projector[2].bias.mul_(alpha)
        model.classifier[2].weight.mul_(5.0)
    model.save_pretrained(str(dest))
    return model


def reference_answer(model, text, threshold, multi_label=False, relations=False):
    schema = model.create_schema().entities(LABELS)
    if relations:
        schema = schema.relations(RELATIONS)
    schema = schema.classification(TASK, CLASSES, multi_label=multi_label)
    return model.extract(text, schema, threshold=threshold, include_confidence=True, include_spans=True)


def reference_relations(answer, text):
    """The library's triples as SIE lists them (type by type, instance by instance), with both ends'
    confidences; an end only in the "." appended to the text drops its triple in SIE."""
    found = answer.get("relation_extraction", {})
    return [(name, t["head"]["start"], min(t["head"]["end"], len(text)), t["tail"]["start"],
             min(t["tail"]["end"], len(text)), t["head"]["confidence"], t["tail"]["confidence"])
            for name in RELATIONS for t in found.get(name, [])
            if t["head"]["start"] < len(text) and t["tail"]["start"] < len(text)]


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


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_relations_equal_the_library(built, threshold):
    """Relation types beside the entities and the classification: per type and predicted instance,
    the best head and tail spans; the entities and the class are those of the request without them."""
    _, _, reference, engine = built
    classify = {"task": TASK, "labels": CLASSES}
    result = engine.extract_sync("gliner2/tiny", TEXTS, LABELS, threshold=threshold, classify=classify,
                                 relation_labels=RELATIONS)
    total = 0
    for text, item in zip(TEXTS, result.items):
        answer = reference_answer(reference, text, threshold, relations=True)
        assert_same(item, answer, text)
        expected = reference_relations(answer, text)
        assert [(r.relation, r.head.start, r.head.end, r.tail.start, r.tail.end) for r in item.relations] == \
            [x[:5] for x in expected]
        np.testing.assert_allclose([(r.head.score, r.tail.score) for r in item.relations],
                                   np.reshape([x[5:] for x in expected], (-1, 2)), atol=1e-5)
        spans = {(e.start, e.end): e.label for e in item.entities}
        for r in item.relations:
            assert r.score == min(r.head.score, r.tail.score)
            assert r.head.text == text[r.head.start:r.head.end].strip()
            assert r.head.label == spans.get((r.head.start, r.head.end), "head")
            assert r.tail.label == spans.get((r.tail.start, r.tail.end), "tail")
        total += len(item.relations)
    assert total >= (2 * len(RELATIONS) * len(TEXTS) if threshold == 0.0 else 1)
    plain = engine.extract_sync("gliner2/tiny", TEXTS[:1], LABELS).items[0]
    assert plain.relations is None  # no relation_labels: no relations field


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
    (dict(relation_labels=[]), "relation_labels"),
    (dict(relation_labels=["works [R] for"]), "relation_labels[0]"),
    (dict(relation_labels=[f"relation {i} of many" for i in range(40)]), "labels"),  # fills the 128-token window
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
            result = client.extract("g2", TEXTS, LABELS, threshold=0.0, relation_labels=RELATIONS,
                                    classify={"task": TASK, "labels": CLASSES})
            for text, item in zip(TEXTS, result.items):
                expected = reference_relations(reference_answer(reference, text, 0.0, relations=True), text)
                assert [(r.relation, r.head.start, r.tail.end) for r in item.relations] == \
                    [(x[0], x[1], x[4]) for x in expected] and expected
        bad = httpx.post(f"{server.url}/v1/extract/g2", json={**body, "classify": {"task": TASK}}, timeout=30)
        assert bad.status_code == 400 and "classify.labels" in bad.json()["error"]["message"]
        # embedded: the same client API in-process, the directory served without a card
        with SIEClient("embedded", local_models={"local/g2": str(root)}) as embedded:
            result = embedded.extract("local/g2", TEXTS[:1], LABELS, classify={"task": TASK, "labels": CLASSES})
            assert_same(result.items[0], reference_answer(reference, TEXTS[0], 0.5), TEXTS[0])
    finally:
        server.stop()
