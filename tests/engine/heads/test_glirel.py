"""GLiREL relation extraction against the `glirel` library's `batch_predict_relations` on the
same weights: a GLiREL built from its config on a tiny random DeBERTa-v3 backbone (saved with
save_pretrained), its random head scaled so probabilities spread over (0, 1). SIE serves the
saved directory; triples and scores must equal the library's, alone and batched, through the
engine, over HTTP (JSON and msgpack) and through the client; a GLiNER named in the request
finds the entities first (the knowledge-graph pipeline)."""

from __future__ import annotations

import argparse
import math

import httpx
import msgpack
import numpy as np
import pytest
import torch
import yaml
from test_gliner_deberta import tiny_deberta
from test_gliner_extract import build_reference as build_gliner

import sie_engine.models.glirel.head as glirel_head
from server_fixtures import start_server
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest, UnsupportedOutput
from sie_engine.models.gliner.prompt import split_words
from sie_engine.models.glirel.checkpoint import load_glirel_config
from sie_engine.models.glirel.prompt import prepare, word_span
from sie_engine.tokenizer import TextTokenizer
from tiny_models import make_tiny_bert

RELATIONS = ["born in", "works for", "located in", "founded"]
# (text, entities as [first word, last word, label]) in glirel's word indices
DOCS = [
    ("Barack Obama was born in Hawaii and worked with Google in Mountain View.",
     [[0, 1, "person"], [5, 5, "location"], [9, 9, "organization"], [11, 12, "location"]]),
    ("Ada Lovelace met Charles Babbage in London.", [[0, 1, "person"], [3, 4, "person"], [6, 6, "location"]]),
    ("Linus wrote Linux at the University of Helsinki in 1991, and it runs on servers at Amazon.",
     [[0, 0, "person"], [2, 2, "software"], [5, 7, "organization"], [16, 16, "organization"]]),
    ("Zürich is a city.", [[0, 0, "location"]]),  # one entity: no pairs
]
VARIANTS = {
    # glirel-large-v0's settings: first sub-token, [REL] and label averaged, a projection to the head's width
    "both-first": dict(hidden_size=48, subtoken_pooling="first", label_embed_strategy="both"),
    # last sub-token, label-word vectors, no projection, pairs i > j only within 5 words
    "label-last": dict(hidden_size=32, subtoken_pooling="last", label_embed_strategy="label",
                       max_entity_pair_distance=5),
}
THRESHOLD = 0.5


def build_glirel(dest, backbone, seed: int, **settings):
    """A GLiREL with a random head (scaled for spread), saved to `dest`; returns the library's model."""
    from glirel import GLiREL

    config = dict(model_name=str(backbone), max_width=12, dropout=0.3, fine_tune=True, span_marker_mode="markerv1",
                  rel_mode="marker", scorer="dot", max_len=384, max_entity_pair_distance=None,
                  fixed_relation_types=True, refine_prompt=False, refine_relation=False, ffn_mul=4,
                  coref_classifier=False, device="cpu")
    config.update(settings)
    torch.manual_seed(seed)
    model = GLiREL(argparse.Namespace(**config)).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.startswith("token_rep_layer.bert_layer"):
                scale = 1.0 / math.sqrt(param.shape[1]) if param.dim() >= 2 else 0.1
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
        # centre the logits and give them a spread of about 3, so triples fall on both sides of 0.5
        logits = np.log([r["score"] / (1 - r["score"]) for r in reference_triples(model, DOCS[0], 0.0)])
        last = model.prompt_rep_layer[3]
        alpha = 3.0 / logits.std()
        last.weight.mul_(alpha)
        last.bias.mul_(alpha)
    model.save_pretrained(dest)
    return model


def reference_triples(model, doc, threshold):
    text, entities = doc
    ner = [[s, e, label, " ".join(split_words(text).texts[s:e + 1])] for s, e, label in entities]
    return model.batch_predict_relations([text], RELATIONS, threshold=threshold, ner=[ner])[0]


def char_entities(doc) -> list[dict]:
    text, entities = doc
    words = split_words(text)
    return [{"start": words.starts[s], "end": words.ends[e], "label": label} for s, e, label in entities]


def item(doc) -> dict:
    return {"text": doc[0], "entities": char_entities(doc)}


def as_words(doc, relations) -> list[tuple]:
    """SIE's relations -> glirel's (head words, tail words, label) with scores, via the entity spans sent."""
    index = {(e["start"], e["end"]): (s, t) for e, (s, t, _) in zip(char_entities(doc), doc[1])}
    return [(index[(r.head.start, r.head.end)], index[(r.tail.start, r.tail.end)], r.relation, r.score)
            for r in relations]


def assert_same(doc, relations, expected):
    ours = as_words(doc, relations)
    theirs = [((r["head_pos"][0], r["head_pos"][1] - 1), (r["tail_pos"][0], r["tail_pos"][1] - 1), r["label"],
               r["score"]) for r in expected]
    assert [o[:3] for o in ours] == [t[:3] for t in theirs]
    np.testing.assert_allclose([o[3] for o in ours], [t[3] for t in theirs], atol=1e-5)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("glirel")
    backbone = tiny_deberta("v3", tmp / "backbone", seed=1)
    models = {name: (tmp / name, build_glirel(tmp / name, backbone, seed, **settings))
              for seed, (name, settings) in enumerate(VARIANTS.items())}
    gliner_dir = tmp / "gliner"
    gliner = build_gliner(gliner_dir, make_tiny_bert(tmp / "bert", seed=3), seed=4, hidden_size=32, max_width=6)
    cards = [ModelCard(id=f"glirel/{name}", weights=WeightsSource(path=str(root)), outputs=("relations",),
                       max_seq_len=128, max_batch_tokens=1024, options={"relations": {"max_labels": 6}})
             for name, (root, _) in models.items()]
    cards.append(ModelCard(id="gliner/tiny", weights=WeightsSource(path=str(gliner_dir)), outputs=("extract",),
                           max_seq_len=128))
    with Engine(Catalog(cards), device="cpu") as engine:
        yield tmp, models, gliner, engine


@pytest.mark.parametrize("name", list(VARIANTS))
def test_triples_equal_the_library(built, name):
    _, models, _, engine = built
    reference = models[name][1]
    result = engine.extract_sync(f"glirel/{name}", [item(d) for d in DOCS], RELATIONS, threshold=THRESHOLD)
    total = 0
    for doc, got in zip(DOCS, result.items):
        expected = reference_triples(reference, doc, THRESHOLD)
        assert_same(doc, got.relations, expected)
        assert [(e.start, e.end, e.label, e.score) for e in got.entities] == \
            [(e["start"], e["end"], e["label"], None) for e in char_entities(doc)]
        total += len(expected)
    assert total >= 8 and result.tokens > 0
    # every score, not only those above the threshold
    low = engine.extract_sync(f"glirel/{name}", [item(DOCS[2])], RELATIONS, threshold=0.0)
    assert_same(DOCS[2], low.items[0].relations, reference_triples(reference, DOCS[2], 0.0))


def test_batch_invariance_and_top_k(built, monkeypatch):
    _, models, _, engine = built
    together = engine.extract_sync("glirel/both-first", [item(d) for d in DOCS], RELATIONS, threshold=0.0).items
    monkeypatch.setattr(glirel_head, "PAIR_CHUNK", 5)  # the pair MLP in chunks gives the same scores
    chunked = engine.extract_sync("glirel/both-first", [item(d) for d in DOCS], RELATIONS, threshold=0.0).items
    monkeypatch.undo()
    for a, b in zip(chunked, together):
        assert [(r.head.start, r.tail.start, r.relation) for r in a.relations] == \
            [(r.head.start, r.tail.start, r.relation) for r in b.relations]
        np.testing.assert_allclose([r.score for r in a.relations], [r.score for r in b.relations], atol=1e-6)
    for doc, batched in zip(DOCS, together):
        alone = engine.extract_sync("glirel/both-first", [item(doc)], RELATIONS, threshold=0.0).items[0]
        assert [(r.head.start, r.tail.start, r.relation) for r in alone.relations] == \
            [(r.head.start, r.tail.start, r.relation) for r in batched.relations]
        np.testing.assert_allclose([r.score for r in alone.relations], [r.score for r in batched.relations],
                                   atol=1e-6)
    best = engine.extract_sync("glirel/both-first", [item(DOCS[0])], RELATIONS, threshold=0.0, top_k=1).items[0]
    expected = models["both-first"][1].batch_predict_relations(
        [DOCS[0][0]], RELATIONS, threshold=0.0, top_k=1,
        ner=[[[s, e, label] for s, e, label in DOCS[0][1]]])[0]
    ours = sorted(as_words(DOCS[0], best.relations))
    theirs = sorted(((r["head_pos"][0], r["head_pos"][1] - 1), (r["tail_pos"][0], r["tail_pos"][1] - 1), r["label"],
                     r["score"]) for r in expected)
    assert [o[:3] for o in ours] == [t[:3] for t in theirs] and len(ours) == 12  # 4 entities: 12 ordered pairs
    np.testing.assert_allclose([o[3] for o in ours], [t[3] for t in theirs], atol=1e-5)


def test_long_text_runs_in_windows(built):
    """A text far over the window: pairs of nearby entities are scored (as the window holding both sees
    them), batches stay under the token budget, far pairs are left out."""
    _, models, _, engine = built
    filler = "and then the story went on for a while "
    text = ("Ada Lovelace met Charles Babbage in London. " + filler * 30 + "Linus wrote Linux in Helsinki.")
    words = split_words(text)

    def span(phrase):
        start = text.index(phrase)
        return {"start": start, "end": start + len(phrase), "label": "x"}

    entities = [span("Ada Lovelace"), span("London"), span("Linus"), span("Helsinki")]
    got = engine.extract_sync("glirel/both-first", [{"text": text, "entities": entities}], RELATIONS,
                              threshold=0.0).items[0].relations
    pairs = {(r.head.text, r.tail.text) for r in got}
    assert ("Ada Lovelace", "London") in pairs and ("Linus", "Helsinki") in pairs
    assert ("Ada Lovelace", "Helsinki") not in pairs and len(words) > 128
    # each window's pairs score as the library scores the window's words alone
    root, reference = models["both-first"]
    spans = np.asarray([word_span(words, e["start"], e["end"]) for e in entities])
    windows = prepare(TextTokenizer(root, 128), load_glirel_config(root), [text], RELATIONS, [spans]).windows
    assert len(windows) == 2
    scores = {(r.head.start, r.tail.start, r.relation): r.score for r in got}
    for window in windows:
        first = window.first_word
        tokens = words.texts[first:first + window.num_words]
        used = sorted(set(window.pair_ids.ravel().tolist()))
        ner = [[int(spans[k][0]) - first, int(spans[k][1]) - first, "x"] for k in used]
        expected = reference.batch_predict_relations([tokens], RELATIONS, threshold=0.0, ner=[ner])[0]
        for r in expected:
            head, tail = entities[used[ner.index([r["head_pos"][0], r["head_pos"][1] - 1, "x"])]], \
                entities[used[ner.index([r["tail_pos"][0], r["tail_pos"][1] - 1, "x"])]]
            assert abs(scores[(head["start"], tail["start"], r["label"])] - r["score"]) < 1e-5


def test_entities_from_a_gliner_in_the_same_request(built):
    _, models, gliner, engine = built
    texts = [d[0] for d in DOCS[:3]]
    entity_labels = ["person", "location", "organization"]
    result = engine.extract_sync("glirel/both-first", texts, RELATIONS, entity_model="gliner/tiny",
                                 entity_labels=entity_labels, entity_threshold=0.3, threshold=0.0)
    found = 0
    for text, got in zip(texts, result.items):
        expected_entities = gliner.predict_entities(text, entity_labels, threshold=0.3)
        assert [(e.start, e.end, e.label) for e in got.entities] == \
            [(e["start"], e["end"], e["label"]) for e in expected_entities]
        words = split_words(text)
        doc = (text, [[words.starts.index(e.start), words.ends.index(e.end), e.label] for e in got.entities])
        if len(doc[1]) > 1:
            assert_same(doc, got.relations, reference_triples(models["both-first"][1], doc, 0.0))
            found += 1
    assert found >= 2
    # the found entities sent back as they came (text and score included) give the same relations
    again = engine.extract_sync("glirel/both-first", [
        {"text": t, "entities": [dict(text=e.text, label=e.label, score=e.score, start=e.start, end=e.end)
                                 for e in got.entities]} for t, got in zip(texts, result.items)],
        RELATIONS, threshold=0.0)
    assert [i.relations for i in again.items] == [i.relations for i in result.items]


@pytest.mark.parametrize("model, fields, error, where", [
    ("glirel/both-first", dict(items=[{"text": "Ada met Bob.", "entities": [{"start": 8, "end": 40, "label": "p"}]}]),
     InvalidRequest, "items[0].entities[0] span 8..40"),
    ("glirel/both-first", dict(items=[{"text": "Ada  met", "entities": [{"start": 3, "end": 5, "label": "p"}]}]),
     InvalidRequest, "cover no word"),
    ("glirel/both-first", dict(items=[{"text": "Ada met Bob.", "entities": [{"start": 0, "end": 3}]}]),
     InvalidRequest, "label"),
    ("glirel/both-first", dict(items=["Ada met Bob."], labels=[f"r{i}" for i in range(7)]), InvalidRequest,
     "at most 6"),
    ("glirel/both-first", dict(items=["Ada met Bob."], flat=False), InvalidRequest, "flat"),
    ("glirel/both-first", dict(items=["Ada met Bob."], entity_labels=["person"]), InvalidRequest, "entity_model"),
    ("glirel/both-first", dict(items=["Ada met Bob."], entity_model="glirel/label-last", entity_labels=["person"]),
     InvalidRequest, "does not extract entities"),
    ("glirel/both-first", dict(items=[item(DOCS[1])], entity_model="gliner/tiny", entity_labels=["person"]),
     InvalidRequest, "not both"),
    ("gliner/tiny", dict(items=[item(DOCS[1])]), UnsupportedOutput, "no relations output"),
    ("gliner/tiny", dict(items=["Ada met Bob."], classify={"task": "t", "labels": ["a"]}), InvalidRequest,
     "classify applies to GLiNER2"),
    ("glirel/both-first", dict(items=["Ada met Bob."], classify={"task": "t", "labels": ["a"]}), InvalidRequest,
     "classify applies to GLiNER2"),  # refused, not dropped
    ("glirel/both-first", dict(items=["Ada met Bob."], relation_labels=["works_for"]), InvalidRequest,
     "relation types in labels"),
    ("glirel/both-first", dict(items=[{"text": "a " * 300, "entities": [
        {"start": 2 * i, "end": 2 * i + 1, "label": "x"} for i in range(300)]}]), InvalidRequest, "at most 256"),
])
def test_bad_relation_requests(built, model, fields, error, where):
    _, _, _, engine = built
    fields = {"labels": RELATIONS, **fields}
    with pytest.raises(error, match=None) as caught:
        engine.extract_sync(model, fields.pop("items"), fields.pop("labels"), **fields)
    assert where in str(caught.value)


@pytest.fixture(scope="module")
def server(built):
    tmp, models, _, _ = built
    cards = tmp / "cards"
    cards.mkdir()
    (cards / "glirel.yaml").write_text(yaml.safe_dump({
        "id": "test/glirel", "weights": {"path": str(models["both-first"][0])}, "outputs": ["relations"],
        "max_seq_len": 128, "max_batch_tokens": 1024}))
    (cards / "gliner.yaml").write_text(yaml.safe_dump({
        "id": "test/gliner", "weights": {"path": str(tmp / "gliner")}, "outputs": ["extract"], "max_seq_len": 128}))
    process = start_server("--models", str(cards), log_dir=tmp)
    try:
        yield process
    finally:
        process.stop()


def test_http_json_msgpack_and_client(built, server):
    from sie_client import AsyncSIEClient, SIEClient

    _, models, _, _ = built
    reference = models["both-first"][1]
    body = {"items": [item(d) for d in DOCS[:2]], "labels": RELATIONS, "threshold": THRESHOLD}
    answer = httpx.post(f"{server.url}/v1/extract/test/glirel", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    packed = httpx.post(f"{server.url}/v1/extract/test/glirel", content=msgpack.packb(body),
                        headers={"Content-Type": "application/msgpack"}, timeout=60)
    assert packed.status_code == 200, packed.text
    for data in (answer.json(), msgpack.unpackb(packed.content)):
        for doc, got in zip(DOCS, data["items"]):
            expected = reference_triples(reference, doc, THRESHOLD)
            words = split_words(doc[0])
            assert [(r["head"]["start"], r["relation"], r["tail"]["end"]) for r in got["relations"]] == \
                [(words.starts[r["head_pos"][0]], r["label"], words.ends[r["tail_pos"][1] - 1]) for r in expected]
            np.testing.assert_allclose([r["score"] for r in got["relations"]], [r["score"] for r in expected],
                                       atol=1e-5)
            assert expected and set(got["relations"][0]["head"]) == {"text", "start", "end", "label"}
    with SIEClient(server.url) as client:
        result = client.extract("test/glirel", [item(d) for d in DOCS[:2]], RELATIONS, threshold=THRESHOLD)
        for doc, got in zip(DOCS, result.items):
            assert_same(doc, got.relations, reference_triples(reference, doc, THRESHOLD))
        joined = client.extract("test/glirel", [DOCS[0][0]], RELATIONS, entity_model="test/gliner",
                                entity_labels=["person", "location"], threshold=0.0)
        assert joined.items[0].relations is not None and all(e.score is not None for e in joined.items[0].entities)

    async def run_async():
        async with AsyncSIEClient(server.url) as client:
            return await client.extract("test/glirel", [item(DOCS[0])], RELATIONS, threshold=THRESHOLD)

    import asyncio

    assert_same(DOCS[0], asyncio.run(run_async()).items[0].relations, reference_triples(reference, DOCS[0], THRESHOLD))
    # embedded: the same client API in-process, the directory served without a card (--model NAME=PATH's path)
    with SIEClient("embedded", local_models={"local/glirel": str(models["both-first"][0])}) as embedded:
        result = embedded.extract("local/glirel", [item(DOCS[0])], RELATIONS, threshold=THRESHOLD)
        assert_same(DOCS[0], result.items[0].relations, reference_triples(reference, DOCS[0], THRESHOLD))
    bad = httpx.post(f"{server.url}/v1/extract/test/gliner", json={"items": [item(DOCS[0])], "labels": ["x"]},
                     timeout=30)
    assert bad.status_code == 400 and "no relations output" in bad.json()["error"]["message"]
    outside = httpx.post(f"{server.url}/v1/extract/test/glirel", timeout=30, json={
        "items": [{"text": "Ada", "entities": [{"start": 0, "end": 9, "label": "p"}]}], "labels": ["x"]})
    assert outside.status_code == 400 and "items[0].entities[0]" in outside.json()["error"]["message"]


def test_the_hub_layout_offline(built, tmp_path, monkeypatch):
    """As the hub holds jackboyla/glirel-large-v0: glirel_config.json + pytorch_model.bin, model_name a hub id
    whose repository gives the backbone's config and tokenizer (not its weights); served by hub id, offline."""
    import json
    import shutil

    import huggingface_hub.constants as hub_constants
    from test_gliner_extract import hub_cache_layout

    tmp, models, _, _ = built
    upload = tmp_path / "upload"
    shutil.copytree(models["both-first"][0], upload)
    config = json.loads((upload / "glirel_config.json").read_text())
    config["model_name"] = "tiny/deberta-v3-backbone"
    (upload / "glirel_config.json").write_text(json.dumps(config))
    backbone = tmp_path / "backbone"
    shutil.copytree(tmp / "backbone", backbone)
    (backbone / "model.safetensors").unlink()  # SIE must not need the backbone repository's weights
    cache = tmp_path / "hub"
    hub_cache_layout(cache, "someone/glirel-tiny", upload)
    hub_cache_layout(cache, "tiny/deberta-v3-backbone", backbone)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    card = ModelCard(id="someone/glirel-tiny", weights=WeightsSource(hub="someone/glirel-tiny"), family="deberta-v2",
                     outputs=("relations",), max_seq_len=128)
    with Engine(Catalog([card]), device="cpu") as engine:
        result = engine.extract_sync(card.id, [item(DOCS[0])], RELATIONS, threshold=THRESHOLD)
    assert_same(DOCS[0], result.items[0].relations, reference_triples(models["both-first"][1], DOCS[0], THRESHOLD))
