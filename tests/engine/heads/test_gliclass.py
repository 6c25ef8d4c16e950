"""GLiClass zero-shot classification (`extract` on a card with the `gliclass` output) against the
gliclass library's own pipeline on the same tiny random weights: DeBERTa-v2 and BERT backbones, the
labels before or after the text, the poolings, label poolings, LSTM and scorers gliclass offers,
multi- and single-label; batch invariance; truncation; bad input; a real server over HTTP (JSON,
msgpack) and the client (sync, async, embedded)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import yaml

from classification_checks import LABELS, TEXTS, assert_classified, assert_top_k_and_threshold_cut_the_ranking
from gliclass_models import gliclass_pipeline, make_gliclass, reference_scores
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest, ModelLoadFailed

VARIANTS = {
    # the knowledgator checkpoints' kind: DeBERTa-v3, labels first, <<LABEL>> states, dot product
    "deberta": dict(backbone="deberta", prompt_first=True, embed_class_token=False, sentencepiece=True),
    "bert": dict(backbone="bert", prompt_first=True),
    "bert-mlp": dict(backbone="bert", prompt_first=False, pooling_strategy="avg", class_token_pooling="average",
                     use_lstm=True, scorer_type="mlp"),
    # gliclass-modern-*'s kind: a ModernBERT backbone (gliclass loads it with AutoModel)
    "modernbert": dict(backbone="modernbert", prompt_first=True, pooling_strategy="avg", embed_class_token=False,
                       scale={"model.classes_projector.linear_2.weight": 0.3}),
    "deberta-wdot": dict(backbone="deberta", prompt_first=True, pooling_strategy="max", class_token_pooling="average",
                         scorer_type="weighted-dot", normalize_features=True,
                         scale={"model.scorer.out_mlp.3.weight": 0.05}),
}
MAX_LABELS = 8  # the test cards' options.gliclass.max_labels


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("gliclass")
    return {name: make_gliclass(base / name, seed=i, **settings) for i, (name, settings) in enumerate(VARIANTS.items())}


def _card(name, root, **options):
    return ModelCard(id=f"gliclass/{name}", weights=WeightsSource(path=str(root)), outputs=("gliclass",),
                     max_seq_len=128, max_batch_tokens=1024,
                     options={"gliclass": {"max_labels": MAX_LABELS, **options}})


@pytest.fixture(scope="module")
def engine(roots):
    with Engine(Catalog([_card(name, root) for name, root in roots.items()]), device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def pipelines(roots):
    return {name: gliclass_pipeline(root) for name, root in roots.items()}


def _assert_matches(items, expected, multi_label):
    assert_classified(items, expected, LABELS, multi_label, atol=1e-4, spread=0.01)


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("multi_label", [True, False])
def test_scores_match_gliclass(engine, pipelines, name, multi_label):
    result = engine.extract_sync(f"gliclass/{name}", TEXTS, LABELS, multi_label=multi_label)
    assert [item.id for item in result.items] == [str(i) for i in range(len(TEXTS))]
    _assert_matches(result.items, reference_scores(pipelines[name], TEXTS, LABELS, multi_label), multi_label)
    assert result.tokens > 0


def test_multi_label_is_the_default_and_batches_of_the_reference_agree(engine, pipelines):
    """The card's default is gliclass' (multi-label); with first-token pooling the pipeline's padded batches
    give the same scores as its batches of one, and SIE's equal both."""
    result = engine.extract_sync("gliclass/deberta", TEXTS, LABELS)
    _assert_matches(result.items, reference_scores(pipelines["deberta"], TEXTS, LABELS, True, batch_size=8), True)


@pytest.mark.parametrize("multi_label", [True, False])
def test_threshold_and_top_k(engine, multi_label):
    assert_top_k_and_threshold_cut_the_ranking(engine, "gliclass/bert", TEXTS, LABELS, multi_label=multi_label)


@pytest.mark.parametrize("name", ["deberta", "bert-mlp"])
def test_answers_do_not_depend_on_batch_company(engine, name):
    """Each item's scores are the same alone as in a request with other items (batch invariance), also when
    the request spans several batches of the card's 1,024-token budget."""
    many = engine.extract_sync(f"gliclass/{name}", TEXTS * 10, LABELS)
    assert many.tokens > 1024
    together = engine.extract_sync(f"gliclass/{name}", TEXTS, LABELS)
    for i, item in enumerate(many.items):
        want = together.items[i % len(TEXTS)].classifications
        assert [c.label for c in item.classifications] == [c.label for c in want]
        np.testing.assert_allclose([c.score for c in item.classifications], [c.score for c in want], atol=1e-6)
    for i, text in enumerate(TEXTS):
        alone = engine.extract_sync(f"gliclass/{name}", [text], LABELS)
        assert [c.label for c in alone.items[0].classifications] == [c.label for c in together.items[i].classifications]
        np.testing.assert_allclose([c.score for c in alone.items[0].classifications],
                                   [c.score for c in together.items[i].classifications], atol=1e-6)


def test_long_texts_are_cut_never_the_labels(engine, pipelines, roots):
    """Labels first: the end of the sequence goes, as the pipeline truncates at the same length. Text first
    (where the pipeline would cut the labels away): the end of the text goes, every label is scored."""
    long_text = " ".join(TEXTS * 12)
    result = engine.extract_sync("gliclass/deberta", [long_text, TEXTS[0]], LABELS)
    reference = gliclass_pipeline(roots["deberta"], max_length=128)
    _assert_matches(result.items, reference_scores(reference, [long_text, TEXTS[0]], LABELS, True), True)
    assert result.tokens == 128 + engine.extract_sync("gliclass/deberta", [TEXTS[0]], LABELS).tokens
    cut = engine.extract_sync("gliclass/bert-mlp", [long_text], LABELS)
    assert len(cut.items[0].classifications) == len(LABELS) and cut.tokens == 128


def test_bad_input_is_refused_with_the_field(engine):
    cases = [
        (dict(labels=[]), "labels"),
        (dict(labels=[f"label {i}" for i in range(MAX_LABELS + 1)]), "labels"),  # the card's limit
        (dict(labels=["a", ""]), "labels[1]"),
        (dict(labels=["a", "x" * 257]), "labels[1]"),  # over-long
        (dict(labels=["a", "b<<LABEL>>c"]), "labels[1]"),
        (dict(labels=[" ".join(["word"] * 20) + str(i) for i in range(MAX_LABELS)]), "labels"),  # no room for the text
        (dict(labels=LABELS, hypothesis_template="This is {}."), "hypothesis_template"),
        (dict(labels=LABELS, flat=False), "flat"),
        (dict(labels=LABELS, top_k=0), "top_k"),
        (dict(labels=LABELS, threshold=2), "threshold"),
    ]
    for fields, field in cases:
        with pytest.raises(InvalidRequest) as info:
            engine.extract_sync("gliclass/deberta", TEXTS, **fields)
        assert info.value.field == field, (fields, info.value)
    with pytest.raises(InvalidRequest, match="at most 8"):
        engine.extract_sync("gliclass/deberta", TEXTS, [str(i) for i in range(9)])


def test_unsupported_settings_fail_to_load_naming_the_field(tmp_path, roots):
    import json

    root = tmp_path / "layerwise"
    root.mkdir()
    for path in roots["bert"].iterdir():
        (root / path.name).write_bytes(path.read_bytes())
    config = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(json.dumps({**config, "squeeze_layers": True}))
    bad_options = dataclasses.replace(_card("options", roots["bert"]), options={"gliclass": {"max_labels": "ten"}})
    with Engine(Catalog([_card("layerwise", root), bad_options]), device="cpu") as engine:
        with pytest.raises(ModelLoadFailed, match="squeeze_layers"):
            engine.extract_sync("gliclass/layerwise", TEXTS, LABELS)
        with pytest.raises(ModelLoadFailed, match="options.gliclass takes max_labels"):
            engine.extract_sync("gliclass/options", TEXTS, LABELS)


def test_pooling_matches_gliclass_poolings():
    """Every text pooling of gliclass (poolings.POOLING2OBJECT) on one sequence equals SIE's over a packed batch."""
    from gliclass.poolings import POOLING2OBJECT

    from sie_engine.models.gliclass.checkpoint import POOLINGS
    from sie_engine.models.gliclass.head import pool

    torch.manual_seed(0)
    lengths = [5, 1, 9]
    x = torch.randn(sum(lengths), 6)
    seq = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    starts = torch.tensor([0, 5, 6])
    for how in POOLINGS:
        got = pool(x, seq, starts, torch.tensor(lengths), how)
        want = torch.cat([POOLING2OBJECT[how]()(part[None]) for part in x.split(lengths)])
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6, msg=how)


def test_card_less_directory_and_catalog_cards(roots, tmp_path, monkeypatch):
    """A local GLiClass directory without a card serves extract; the catalog's GLiClass cards list extract,
    carry their label limit, and run on a stand-in of their family (one from a hub cache, offline)."""
    import shutil

    from huggingface_hub import constants

    from sie_engine.local_card import card_from_local_dir

    local = card_from_local_dir("local/gliclass", roots["deberta"])
    assert local.outputs == ("gliclass",) and local.tasks == ("extract",)
    catalog = Catalog.builtin()
    ids = ["knowledgator/gliclass-small-v1.0", "knowledgator/gliclass-base-v1.0", "knowledgator/gliclass-large-v1.0",
           "knowledgator/gliclass-large-v3.0"]
    cards = []
    for model_id in ids:
        card = catalog.get(model_id)
        assert card is not None and card.family == "deberta-v2" and card.outputs == ("gliclass",), model_id
        assert card.tasks == ("extract",) and card.options["gliclass"]["max_labels"] >= 25
        if model_id != ids[0]:  # the first is served from the hub cache, below
            card = dataclasses.replace(card, weights=WeightsSource(path=str(roots["deberta"])))
        cards.append(card)
    # a hub cache entry under the real id, read offline (the loader's path for real users)
    revision = "0" * 40
    repo = tmp_path / ("models--" + ids[0].replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    shutil.copytree(roots["deberta"], repo / "snapshots" / revision)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with Engine(Catalog(cards + [local]), device="cpu") as engine:
        expected = engine.extract_sync("local/gliclass", TEXTS[:2], LABELS[:3])
        assert all(len(item.classifications) == 3 for item in expected.items)
        for card in cards:
            assert engine.extract_sync(card.id, TEXTS[:2], LABELS[:3]).items == expected.items, card.id


@pytest.fixture(scope="module")
def server(roots, tmp_path_factory):
    from server_fixtures import start_server

    cards = tmp_path_factory.mktemp("gliclass-cards")
    card = {"id": "gliclass/served", "weights": {"path": str(roots["bert-mlp"])}, "outputs": ["gliclass"],
            "family": "bert", "max_seq_len": 128, "options": {"gliclass": {"max_labels": MAX_LABELS}}}
    (cards / "served.yaml").write_text(yaml.safe_dump(card))
    process = start_server("--no-builtin", "--models", str(cards), "--model", f"local/gliclass={roots['deberta']}",
                           log_dir=tmp_path_factory.mktemp("gliclass-server"))
    try:
        yield process
    finally:
        process.stop()


def test_http_json_msgpack_and_the_clients(server, pipelines, engine):
    """POST /v1/extract on a real server (a card from --models, a card-less --model directory), through
    sie_client over HTTP (JSON and msgpack, sync and async) and embedded: the pipeline's scores."""
    import asyncio

    import httpx

    from sie_client import AsyncSIEClient, SIEClient

    items = [{"id": "a", "text": TEXTS[0]}, {"id": "b", "text": TEXTS[3]}]
    for model, name in (("gliclass/served", "bert-mlp"), ("local/gliclass", "deberta")):
        expected = reference_scores(pipelines[name], [TEXTS[0], TEXTS[3]], LABELS, False)
        response = httpx.post(f"{server.url}/v1/extract/{model}",
                              json={"items": items, "labels": LABELS, "multi_label": False}, timeout=60)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["model"] == model and [item["id"] for item in answer["items"]] == ["a", "b"]
        for item, want in zip(answer["items"], expected):
            assert set(item) == {"id", "entities", "classifications"} and item["entities"] == []
            assert [set(c) for c in item["classifications"]] == [{"label", "score"}] * len(LABELS)
            for c in item["classifications"]:
                assert abs(c["score"] - want[c["label"]]) < 1e-4
        for encoding in ("json", "msgpack"):
            with SIEClient(server.url, encoding=encoding) as client:
                result = client.extract(model, items, LABELS, multi_label=False)
            _assert_matches(result.items, expected, False)

    async def async_calls():
        async with AsyncSIEClient(server.url, encoding="msgpack") as client:
            over_http = await client.extract("gliclass/served", items, LABELS, top_k=2)
        async with AsyncSIEClient(engine=engine) as client:
            embedded = await client.extract("gliclass/bert-mlp", items, LABELS, top_k=2)
        return over_http, embedded

    over_http, embedded = asyncio.run(async_calls())
    with SIEClient(engine=engine) as client:
        embedded_sync = client.extract("gliclass/bert-mlp", items, LABELS, top_k=2)
    for result in (embedded, embedded_sync):
        assert [i.id for i in result.items] == ["a", "b"]
        for got, want in zip(result.items, over_http.items):
            assert [c.label for c in got.classifications] == [c.label for c in want.classifications]
            np.testing.assert_allclose([c.score for c in got.classifications],
                                       [c.score for c in want.classifications], atol=1e-5)

    for body, field in (({"items": items, "labels": []}, "labels"),
                        ({"items": items, "labels": [str(i) for i in range(MAX_LABELS + 1)]}, "labels"),
                        ({"items": items, "labels": ["ok", ""]}, "labels[1]"),
                        ({"items": items, "labels": ["ok", "x" * 300]}, "labels[1]")):
        bad = httpx.post(f"{server.url}/v1/extract/gliclass/served", json=body, timeout=60)
        assert bad.status_code == 400, bad.text
        error = bad.json()["error"]
        assert error["field"] == field and error["message"], error
