"""Zero-shot classification with NLI cross-encoders (`extract` on a card with the `zeroshot`
output) against transformers' `pipeline("zero-shot-classification")` on the same tiny random
weights: BERT, XLM-R (RoBERTa layout) and DeBERTa-v2 sequence classifiers, single- and multi-label, several items and
labels in one request; bad input; one HTTP round trip through the server and the client."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from classification_checks import LABELS, TEXTS, assert_classified, assert_top_k_and_threshold_cut_the_ranking
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest, ModelLoadFailed
from tiny_models import save_tiny, tiny_bert_config, tiny_xlmr_config

NLI_LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}


def _spread(model):
    """Random weights at the usual 0.02 scale give every label the same score to 1e-5: widen the head
    (and the backbone's, initializer_range) so that the scores tell the labels apart."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith(("classifier", "pooler", "bert.pooler", "roberta.pooler")):
                param.normal_(0.0, 0.5 if name.endswith("weight") else 0.1)
    return model


def _bert_nli(dest, id2label=NLI_LABELS, seed=0):
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    config = tiny_bert_config(num_labels=len(id2label), initializer_range=0.3, id2label=dict(id2label),
                              label2id={v: k for k, v in id2label.items()})
    return save_tiny(_spread(BertForSequenceClassification(config).eval()), dest)


def _no_segment_ids(root):
    """DeBERTa and RoBERTa feed no segment ids: say so as their tokenizer_config does."""
    tok_config = json.loads((root / "tokenizer_config.json").read_text())
    tok_config["model_input_names"] = ["input_ids", "attention_mask"]
    (root / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return root


def _xlmr_nli(dest):
    """The RoBERTa layout (classifier.dense + out_proj) of nli-MiniLM2-L6-H768, entailment in the middle."""
    from transformers import XLMRobertaForSequenceClassification

    torch.manual_seed(3)
    id2label = {0: "contradiction", 1: "entailment", 2: "neutral"}
    config = tiny_xlmr_config(num_labels=3, initializer_range=0.3, id2label=id2label,
                              label2id={v: k for k, v in id2label.items()})
    return _no_segment_ids(save_tiny(_spread(XLMRobertaForSequenceClassification(config).eval()), dest))


def _deberta_nli(dest):
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(1)
    config = DebertaV2Config(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=512, relative_attention=True, position_buckets=32, max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
        pooler_hidden_size=32, pooler_hidden_act="gelu", num_labels=2, initializer_range=0.3,
        id2label={0: "entailment", 1: "not_entailment"}, label2id={"entailment": 0, "not_entailment": 1},
    )
    return _no_segment_ids(save_tiny(_spread(DebertaV2ForSequenceClassification(config).eval()), dest))


MODELS = {"bert": _bert_nli, "deberta": _deberta_nli, "xlmr": _xlmr_nli,
          "no-entailment": lambda d: _bert_nli(d, {0: "negative", 1: "positive"}, seed=2)}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("nli")
    return {name: make(base / name) for name, make in MODELS.items()}


def _cards(roots):
    return [ModelCard(id=f"nli/{name}", weights=WeightsSource(path=str(root)), outputs=("zeroshot",),
                      max_seq_len=128, max_batch_tokens=1024) for name, root in roots.items()]


@pytest.fixture(scope="module")
def engine(roots):
    with Engine(Catalog(_cards(roots)), device="cpu") as engine:
        yield engine


def _pipeline(root):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    model = AutoModelForSequenceClassification.from_pretrained(str(root)).eval()
    return pipeline("zero-shot-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(str(root)),
                    device="cpu")


def _expected(root, texts, labels, **kwargs):
    out = _pipeline(root)(texts, candidate_labels=labels, **kwargs)
    return [dict(zip(o["labels"], o["scores"])) for o in (out if isinstance(out, list) else [out])]


@pytest.mark.parametrize("name", ["bert", "deberta", "xlmr"])
@pytest.mark.parametrize("multi_label", [False, True])
def test_scores_match_the_pipeline(engine, roots, name, multi_label):
    result = engine.extract_sync(f"nli/{name}", TEXTS, LABELS, multi_label=multi_label)
    expected = _expected(roots[name], TEXTS, LABELS, multi_label=multi_label)
    assert [item.id for item in result.items] == [str(i) for i in range(len(TEXTS))]
    assert_classified(result.items, expected, LABELS, multi_label, atol=1e-5, spread=0.005)
    assert result.tokens > 0


def test_template_single_label_threshold_and_top_k(engine, roots):
    template = "The topic of this text is {}."
    result = engine.extract_sync("nli/bert", TEXTS[:2], LABELS, hypothesis_template=template)
    expected = _expected(roots["bert"], TEXTS[:2], LABELS, hypothesis_template=template)
    for item, want in zip(result.items, expected):
        np.testing.assert_allclose([c.score for c in item.classifications],
                                   [want[c.label] for c in item.classifications], atol=1e-5)
    # one label: the pipeline scores it against contradiction, as multi-label
    one = engine.extract_sync("nli/bert", TEXTS[:2], ["software"])
    want = _expected(roots["bert"], TEXTS[:2], ["software"])
    np.testing.assert_allclose([i.classifications[0].score for i in one.items], [w["software"] for w in want],
                               atol=1e-5)
    assert_top_k_and_threshold_cut_the_ranking(engine, "nli/bert", TEXTS, LABELS, multi_label=True)


def test_answers_do_not_depend_on_batch_company(engine):
    """Each item's scores are the same alone as in a request with others (batch invariance)."""
    together = engine.extract_sync("nli/bert", TEXTS, LABELS)
    for i, text in enumerate(TEXTS):
        alone = engine.extract_sync("nli/bert", [text], LABELS)
        np.testing.assert_allclose([c.score for c in alone.items[0].classifications],
                                   [c.score for c in together.items[i].classifications], atol=1e-6)
        assert [c.label for c in alone.items[0].classifications] == [c.label for c in together.items[i].classifications]


def test_bad_input_is_refused_with_the_field(engine):
    cases = [
        (dict(labels=[]), "labels"),
        (dict(labels=["a", ""]), "labels[1]"),
        (dict(labels=LABELS, hypothesis_template="no placeholder"), "hypothesis_template"),
        (dict(labels=LABELS, hypothesis_template="This is {label}."), "hypothesis_template"),
        (dict(labels=LABELS, top_k=0), "top_k"),
        (dict(labels=LABELS, threshold=2), "threshold"),
        (dict(labels=LABELS, flat=False), "flat"),
    ]
    for fields, field in cases:
        with pytest.raises(InvalidRequest) as info:
            engine.extract_sync("nli/bert", TEXTS, **fields)
        assert info.value.field == field, (fields, info.value)


def test_a_model_without_entailment_fails_to_load_naming_id2label(engine):
    with pytest.raises(ModelLoadFailed) as info:
        engine.extract_sync("nli/no-entailment", TEXTS, LABELS)
    assert "id2label" in str(info.value.message) and "entail" in str(info.value.message)


async def test_http_round_trip_and_client(engine, roots):
    """POST /v1/extract through the real app (in-process) and sie_client over HTTP (JSON, msgpack) and embedded."""
    from aiohttp.test_utils import TestClient, TestServer

    from sie_client import AsyncSIEClient
    from sie_server import ServerSettings, create_app

    items = [{"id": "a", "text": TEXTS[0]}, {"id": "b", "text": TEXTS[3]}]
    body = {"items": items, "labels": LABELS[:3], "multi_label": True, "top_k": 2}
    expected = _expected(roots["bert"], [TEXTS[0], TEXTS[3]], LABELS[:3], multi_label=True)
    async with TestClient(TestServer(create_app(engine, ServerSettings()), host="127.0.0.1")) as server:
        response = await server.post("/v1/extract/nli/bert", json=body)
        assert response.status == 200, await response.text()
        answer = await response.json()
        assert answer["model"] == "nli/bert" and answer["usage"]["tokens"] > 0
        assert [item["id"] for item in answer["items"]] == ["a", "b"]
        for item, want in zip(answer["items"], expected):
            assert set(item) == {"id", "entities", "classifications"}
            assert len(item["classifications"]) == 2
            for c in item["classifications"]:
                assert set(c) == {"label", "score"}
                assert abs(c["score"] - want[c["label"]]) < 1e-5
        bad = await server.post("/v1/extract/nli/bert", json={**body, "labels": []})
        assert bad.status == 400
        bad = await server.post("/v1/extract/nli/bert", json={**body, "hypothesis_template": "nothing"})
        assert bad.status == 400 and (await bad.json())["error"]["field"] == "hypothesis_template"

        url = str(server.make_url("")).rstrip("/")
        for options in ({"encoding": "json"}, {"encoding": "msgpack"}, {"engine": engine}):
            client_options = options if "engine" in options else {"url": url, **options}
            async with AsyncSIEClient(**client_options) as client:
                result = await client.extract("nli/bert", items, LABELS[:3], multi_label=True, top_k=2)
            assert [i.id for i in result.items] == ["a", "b"], options
            for item, raw in zip(result.items, answer["items"]):
                assert [c.label for c in item.classifications] == [c["label"] for c in raw["classifications"]]
                np.testing.assert_allclose([c.score for c in item.classifications],
                                           [c["score"] for c in raw["classifications"]], atol=1e-6)


CATALOG_CARDS = {"MoritzLaurer/deberta-v3-base-zeroshot-v2.0": "deberta-v2",
                 "cross-encoder/nli-deberta-v3-base": "deberta-v2", "cross-encoder/nli-MiniLM2-L6-H768": "bert"}


def test_builtin_cards_and_a_card_less_directory_serve_classification(roots):
    """The catalog's NLI cards list extract (through `zeroshot`) and run on a stand-in of their family; a local
    sequence-classification directory whose id2label names entailment serves extract as well as score."""
    import dataclasses

    from sie_engine.local_card import card_from_local_dir

    catalog = Catalog.builtin()
    cards = []
    for model_id, family in CATALOG_CARDS.items():
        card = catalog.get(model_id)
        assert card is not None and card.family == family and card.outputs == ("zeroshot",), model_id
        assert card.tasks == ("extract",) and "id2label" in card.description
        stand_in = roots["deberta"] if family == "deberta-v2" else roots["xlmr"]  # MiniLM2-L6-H768: RoBERTa
        cards.append(dataclasses.replace(card, weights=WeightsSource(path=str(stand_in))))
    local = card_from_local_dir("local/nli", roots["xlmr"])
    assert local.outputs == ("score", "zeroshot") and set(local.tasks) == {"score", "extract"}
    assert card_from_local_dir("local/other", roots["no-entailment"]).outputs == ("score", "classifier")
    with Engine(Catalog(cards + [local]), device="cpu") as engine:
        for card in cards + [local]:
            result = engine.extract_sync(card.id, TEXTS[:2], LABELS[:3])
            assert [len(item.classifications) for item in result.items] == [3, 3]
        expected = engine.extract_sync("cross-encoder/nli-MiniLM2-L6-H768", TEXTS[:2], LABELS[:3])
        got = engine.extract_sync("local/nli", TEXTS[:2], LABELS[:3])
        assert got.items == expected.items
        assert len(engine.score_sync("local/nli", TEXTS[0], TEXTS[1:]).scores) == 3
