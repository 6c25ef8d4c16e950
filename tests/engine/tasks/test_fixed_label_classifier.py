"""Fixed-label classification (`extract` on a card with the `classifier` output) against transformers'
`pipeline("text-classification")` on the same tiny random weights: BERT, XLM-R (RoBERTa layout),
DistilBERT and DeBERTa-v2 sequence classifiers, single-label (softmax) and multi-label (sigmoid, from
config.json's problem_type); top_k as the pipeline's (default: the best label); the function_to_apply
overrides (multi_label, raw_scores); labels refused; batch invariance. Tolerance: 1e-5 on every score."""

from __future__ import annotations

import numpy as np
import pytest

from fixed_label_models import MODELS, TEXTS, pipeline_of
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest
from sie_engine.local_card import card_from_local_dir

ALL = 64  # top_k past the model's labels: every label (over the wire, top_k: null)
ATOL = 1e-5


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("fixed-labels")
    return {name: make(base / name) for name, make in MODELS.items()}


@pytest.fixture(scope="module")
def pipelines(roots):
    return {name: pipeline_of(root) for name, root in roots.items()}


@pytest.fixture(scope="module")
def engine(roots):
    cards = [ModelCard(id=f"cls/{name}", weights=WeightsSource(path=str(root)), outputs=("classifier",),
                       max_seq_len=128, max_batch_tokens=1024) for name, root in roots.items()]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


def _as_pairs(item):
    return [(c.label, c.score) for c in item.classifications]


def _assert_ranked_like(items, expected):
    """Each item's (label, score) list equals the pipeline's, in its order (best first)."""
    assert len(items) == len(expected)
    for item, want in zip(items, expected):
        assert [label for label, _ in _as_pairs(item)] == [w["label"] for w in want]
        np.testing.assert_allclose([s for _, s in _as_pairs(item)], [w["score"] for w in want], atol=ATOL)


@pytest.mark.parametrize("name", list(MODELS))
def test_every_label_scored_as_the_pipeline(engine, pipelines, name):
    result = engine.extract_sync(f"cls/{name}", TEXTS, top_k=ALL)
    expected = pipelines[name](TEXTS, top_k=None)
    _assert_ranked_like(result.items, expected)
    scores = [[c.score for c in item.classifications] for item in result.items]
    assert max(s[0] - s[-1] for s in scores) > 0.01  # the random head tells the labels apart
    sums = [sum(s) for s in scores]
    if name.endswith("-multi"):  # sigmoid: each label on its own
        assert any(abs(total - 1.0) > 0.05 for total in sums)
    else:
        np.testing.assert_allclose(sums, 1.0, atol=1e-5)


@pytest.mark.parametrize("name", ["bert", "deberta-multi"])
def test_default_is_the_best_label_and_top_k_cuts(engine, pipelines, name):
    best = engine.extract_sync(f"cls/{name}", TEXTS)
    expected = pipelines[name](TEXTS)  # the pipeline's default: the best label of each text
    assert [_as_pairs(item)[0][0] for item in best.items] == [w["label"] for w in expected]
    assert all(len(item.classifications) == 1 for item in best.items)
    np.testing.assert_allclose([item.classifications[0].score for item in best.items],
                               [w["score"] for w in expected], atol=ATOL)
    _assert_ranked_like(engine.extract_sync(f"cls/{name}", TEXTS, top_k=2).items, pipelines[name](TEXTS, top_k=2))
    full = engine.extract_sync(f"cls/{name}", TEXTS, top_k=ALL)
    cut = engine.extract_sync(f"cls/{name}", TEXTS, top_k=ALL, threshold=0.3)
    for a, b in zip(full.items, cut.items):
        assert b.classifications == [c for c in a.classifications if c.score >= 0.3]


@pytest.mark.parametrize(("fields", "function"), [
    ({"multi_label": True}, "sigmoid"), ({"multi_label": False}, "softmax"), ({"raw_scores": True}, "none")])
def test_function_to_apply_overrides(engine, pipelines, fields, function):
    for name in ("bert", "bert-multi"):
        result = engine.extract_sync(f"cls/{name}", TEXTS, top_k=ALL, **fields)
        _assert_ranked_like(result.items, pipelines[name](TEXTS, top_k=None, function_to_apply=function))


def test_answers_do_not_depend_on_batch_company(engine):
    together = engine.extract_sync("cls/xlmr", TEXTS, top_k=ALL)
    for i, text in enumerate(TEXTS):
        alone = engine.extract_sync("cls/xlmr", [text], top_k=ALL)
        assert [c.label for c in alone.items[0].classifications] == [c.label for c in together.items[i].classifications]
        np.testing.assert_allclose([c.score for c in alone.items[0].classifications],
                                   [c.score for c in together.items[i].classifications], atol=1e-6)


def test_bad_input_is_refused_with_the_field(engine):
    cases = [
        (dict(labels=["positive", "negative"]), "labels", "own labels"),
        (dict(hypothesis_template="This is {}."), "hypothesis_template", "NLI"),
        (dict(top_k=0), "top_k", ""),
        (dict(raw_scores=True, multi_label=True), "raw_scores", "logits"),
        (dict(flat=False), "flat", "fixed-label classifier"),
        (dict(truncate=False, items=["word " * 300]), "items[0].text", "window"),
    ]
    for fields, field, words in cases:
        items = fields.pop("items", TEXTS)
        with pytest.raises(InvalidRequest) as info:
            engine.extract_sync("cls/bert", items, **fields)
        assert info.value.field == field, (fields, info.value)
        assert words in info.value.message, info.value.message


def test_zero_shot_models_still_require_labels(tmp_path):
    from test_zeroshot_nli import _bert_nli

    card = ModelCard(id="nli/bert", weights=WeightsSource(path=str(_bert_nli(tmp_path / "nli"))),
                     outputs=("zeroshot",), max_seq_len=128, max_batch_tokens=1024)
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(InvalidRequest, match="labels is required: model 'nli/bert' is an NLI classifier"):
            engine.extract_sync("nli/bert", TEXTS)


def test_a_local_directory_serves_its_labels(roots):
    card = card_from_local_dir("local/sentiment", roots["bert"])
    assert card.outputs == ("score", "classifier")
    assert "extract" in card.tasks


def test_a_card_that_disagrees_with_its_checkpoint_fails_to_load(roots):
    """options.classifier states what the model publishes: a checkpoint with another number of labels fails
    to load naming both; multi_label overrides the activation (the model card's word over config.json's)."""
    from sie_engine.errors import ModelLoadFailed

    def card(name, **options):
        return ModelCard(id=name, weights=WeightsSource(path=str(roots["bert"])), outputs=("classifier",),
                         max_seq_len=128, max_batch_tokens=1024, options={"classifier": options})

    cards = [card("cls/wrong", num_labels=5), card("cls/sigmoid", num_labels=3, multi_label=True)]
    with Engine(Catalog(cards), device="cpu") as engine:
        with pytest.raises(ModelLoadFailed, match="options.classifier.num_labels is 5.*3 outputs"):
            engine.extract_sync("cls/wrong", TEXTS)
        sigmoid = engine.extract_sync("cls/sigmoid", TEXTS, top_k=ALL)
        forced = engine.extract_sync("cls/sigmoid", TEXTS, top_k=ALL, multi_label=False)
    assert any(abs(sum(c.score for c in item.classifications) - 1.0) > 0.05 for item in sigmoid.items)
    np.testing.assert_allclose([sum(c.score for c in item.classifications) for item in forced.items], 1.0, atol=1e-5)
