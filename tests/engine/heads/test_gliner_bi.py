"""GLiNER bi-encoders against the `gliner` library's `predict_entities` on the same weights.

A bi-encoder (knowledgator/gliner-bi-*, modern-gliner-bi-*, Ihor/gliner-biomed-bi-*) encodes the
text alone and each label with a second encoder (mean-pooled, projected). The references are
gliner's own `BiEncoderSpanGLiNER`s built from config over tiny random encoders (a BERT, a
ModernBERT or a DeBERTa-v3 for the text, a BERT for the labels, widths that need both
projections), their span heads random and spread as test_gliner_extract's are, saved and
reloaded; SIE serves the same directory. Entities, offsets and labels equal, scores within 1e-5.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_gliner_deberta import tiny_deberta
from test_gliner_extract import LABELS, TEXTS, WINDOW_TOKENS, build_reference, long_text, windowed_reference

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest
from sie_engine.models.gliner.checkpoint import GlinerConfig
from sie_engine.models.gliner.labels import LabelCache
from tiny_models import copy_tokenizer, make_tiny_bert

SCORE_TOLERANCE = 1e-5
VARIANTS = {
    # text encoder, labels encoder width, GLiNER settings
    "bert": ("bert", 48, dict(hidden_size=32, max_width=5)),
    "modernbert": ("modernbert", 32, dict(hidden_size=40, max_width=6, subtoken_pooling="mean")),
    # the gliner-biomed bi-encoders' combination: a DeBERTa-v3 text encoder (log-bucketed relative
    # positions, no absolute ones), a BERT labels encoder narrower than the GLiNER width
    "deberta": ("deberta", 24, dict(hidden_size=48, max_width=5)),
}
# the variants run in windows: BERT's absolute positions, and DeBERTa's relative ones (each window
# restarts them, as gliner run on that window does)
WINDOWED = ("bert", "deberta")


def tiny_modernbert(dest: Path, seed: int) -> Path:
    from transformers import ModernBertConfig, ModernBertModel

    from gliclass_models import MODERNBERT
    from tiny_models import MINILM_VOCAB

    torch.manual_seed(seed)
    ModernBertModel(ModernBertConfig(vocab_size=MINILM_VOCAB, **MODERNBERT)).eval().save_pretrained(dest)
    copy_tokenizer(dest)
    return dest


def build_bi_encoder(tmp: Path, name: str, seed: int):
    """A VARIANTS bi-encoder saved under `tmp / name` -> (directory, the reloaded gliner reference)."""
    text, labels_width, settings = VARIANTS[name]
    if text == "modernbert":
        text_dir = tiny_modernbert(tmp / f"{name}-text", seed)
    elif text == "deberta":
        text_dir = tiny_deberta("v3", tmp / f"{name}-text", seed=seed)
    else:
        text_dir = make_tiny_bert(tmp / f"{name}-text", seed=seed)
    labels_dir = make_tiny_bert(tmp / f"{name}-labels", seed=10 + seed, hidden_size=labels_width)
    reference = build_reference(tmp / name, text_dir, seed=seed, labels_encoder=str(labels_dir), **settings)
    assert type(reference.model).__name__ == "BiEncoderSpanModel"
    return tmp / name, reference


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """variant -> (directory, reference bi-encoder GLiNER)."""
    tmp = tmp_path_factory.mktemp("gliner-bi")
    return {name: build_bi_encoder(tmp, name, seed) for seed, name in enumerate(VARIANTS)}


def cards_for(models) -> list[ModelCard]:
    cards = [ModelCard(id=f"bi/{name}", weights=WeightsSource(path=str(root)), outputs=("extract",), max_seq_len=512,
                       max_batch_tokens=2048) for name, (root, _) in models.items()]
    # a small window, so a paragraph needs several
    return cards + [ModelCard(id=f"bi/{name}/window", weights=WeightsSource(path=str(models[name][0])),
                              outputs=("extract",), max_seq_len=WINDOW_TOKENS, max_batch_tokens=512)
                    for name in WINDOWED]


@pytest.fixture(scope="module")
def engine(models):
    engine = Engine(Catalog(cards_for(models)), device="cpu")
    yield engine
    engine.close()


def assert_same(ours, reference) -> None:
    assert [(e.start, e.end, e.text, e.label) for e in ours] == \
        [(e["start"], e["end"], e["text"], e["label"]) for e in reference]
    for mine, theirs in zip(ours, reference):
        assert abs(mine.score - theirs["score"]) < SCORE_TOLERANCE


@pytest.mark.parametrize("flat", [True, False], ids=["flat", "nested"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_predict_entities(engine, models, variant, flat):
    _, reference = models[variant]
    result = engine.extract_sync(f"bi/{variant}", TEXTS, LABELS, threshold=0.5, flat=flat)
    total = 0
    for text, item in zip(TEXTS, result.items):
        expected = reference.predict_entities(text, LABELS, flat_ner=flat, threshold=0.5)
        assert_same(item.entities, expected)
        total += len(expected)
    assert total >= 5, "the comparison must cover real entities"


def test_multi_label_and_threshold(engine, models):
    _, reference = models["bert"]
    for threshold, flat in ((0.3, False), (0.7, True)):
        result = engine.extract_sync("bi/bert", TEXTS[:3], LABELS, threshold=threshold, flat=flat, multi_label=True)
        for text, item in zip(TEXTS, result.items):
            assert_same(item.entities, reference.predict_entities(text, LABELS, flat_ner=flat, threshold=threshold,
                                                                  multi_label=True))


@pytest.mark.parametrize("flat", [True, False], ids=["flat", "nested"])
@pytest.mark.parametrize("variant", WINDOWED)
def test_long_text_windows(engine, models, variant, flat):
    """A text longer than the window: gliner on each of SIE's windows, candidates pooled and decoded once
    (test_gliner_extract's windowed reference), equal to SIE's windows of a bi-encoder."""
    root, reference = models[variant]
    text = long_text()
    prepared, expected = windowed_reference(reference, root, text, flat, 0.5)
    assert len(prepared.windows) >= 4 and len(expected) >= 5
    result = engine.extract_sync(f"bi/{variant}/window", [text, TEXTS[0]], LABELS, threshold=0.5, flat=flat)
    assert_same(result.items[0].entities, expected)
    assert_same(result.items[1].entities, reference.predict_entities(TEXTS[0], LABELS, flat_ner=flat, threshold=0.5))


def run_windows(runner, card, requests):
    """One runner batch of every request's windows -> per window (spans, words, labels, settings, text)."""
    from sie_engine.models.gliner.head import WindowWork
    from sie_engine.tasks.gliner import prepare_request
    from sie_engine.work import WorkItem

    items, meta = [], []
    for texts, labels, settings in requests:
        prepared = prepare_request(runner.tokenizer, card, texts, labels)
        for window in prepared.windows:
            items.append(WorkItem(None, len(items), window.ids, outputs=frozenset({"extract"}),
                                  extra=WindowWork(window, settings, labels=tuple(labels))))
            meta.append((prepared.words[window.item], labels, settings, texts[window.item]))
    return [(r["extract"], *m) for r, m in zip(runner.run(items), meta)]


def spans_as_reference(spans, words, labels):
    return [(words.starts[s.start], words.ends[s.end], labels[s.label], s.score) for s in spans]


def test_mixed_label_sets_in_one_batch_and_a_warm_cache(models):
    """Requests with different label sets in one batch equal gliner per text, and equal each
    request run alone; the labels are encoded once (the second run finds them all cached) and the
    warm answers equal the cold ones exactly."""
    from sie_engine.models.gliner.decode import DecodeSettings
    from sie_engine.runner import build_runner

    root, reference = models["modernbert"]
    card = ModelCard(id="mix", weights=WeightsSource(path=str(root)), outputs=("extract",))
    runner = build_runner(card, root, torch.device("cpu"))
    labels_encoder = runner.heads["extract"].labels
    requests = [(TEXTS[:3], ["person", "city"], DecodeSettings(0.5, True)),
                (TEXTS[2:], LABELS, DecodeSettings(0.3, False)),
                (TEXTS[:2], ["organization", "person"], DecodeSettings(0.6, True, multi_label=True))]
    cold = run_windows(runner, card, requests)
    distinct = {label for _, labels, _ in requests for label in labels}
    assert len(labels_encoder.cache) == len(distinct)
    for spans, words, labels, settings, text in cold:
        expected = reference.predict_entities(text, labels, flat_ner=settings.flat, threshold=settings.threshold,
                                              multi_label=settings.multi_label)
        ours = spans_as_reference(spans, words, labels)
        assert [o[:3] for o in ours] == [(e["start"], e["end"], e["label"]) for e in expected]
        assert all(abs(o[3] - e["score"]) < SCORE_TOLERANCE for o, e in zip(ours, expected))
    assert sum(len(spans) for spans, *_ in cold) >= 5

    encoded = []
    original = labels_encoder.encode
    labels_encoder.encode = lambda labels: encoded.append(list(labels)) or original(labels)
    try:
        warm = run_windows(runner, card, requests)
        alone = [row for request in requests for row in run_windows(runner, card, [request])]
    finally:
        labels_encoder.encode = original
    assert encoded == [], "every label was cached: none encoded again"
    for a, b, c in zip(cold, warm, alone):
        assert spans_as_reference(a[0], a[1], a[2]) == spans_as_reference(b[0], b[1], b[2])
        assert [s[:3] for s in spans_as_reference(a[0], a[1], a[2])] == \
            [s[:3] for s in spans_as_reference(c[0], c[1], c[2])]
        assert all(abs(x[3] - y[3]) < SCORE_TOLERANCE for x, y in
                   zip(spans_as_reference(a[0], a[1], a[2]), spans_as_reference(c[0], c[1], c[2])))

    # a cold cache computes the same vectors as the warm one
    labels = sorted(distinct)
    warm_vectors = labels_encoder.vectors(labels, torch.device("cpu"))
    fresh = labels_encoder.encode(labels)
    torch.testing.assert_close(warm_vectors, fresh, atol=1e-6, rtol=1e-6)


def test_label_vectors_equal_gliner_encode_labels(models):
    """SIE's labels encoder (pooled, projected) against gliner's `BiEncoder.encode_labels` on labels padded
    to the longest (its masked mean)."""
    from sie_engine.runner import build_runner

    root, reference = models["bert"]
    card = ModelCard(id="labels", weights=WeightsSource(path=str(root)), outputs=("extract",))
    labels_encoder = build_runner(card, root, torch.device("cpu")).heads["extract"].labels
    labels = LABELS + ["a much longer label with several words in it"]
    tokenized = reference.data_processor.labels_tokenizer(labels, return_tensors="pt", padding="longest")
    with torch.no_grad():
        theirs = reference.model.token_rep_layer.encode_labels(tokenized["input_ids"], tokenized["attention_mask"])
    torch.testing.assert_close(labels_encoder.encode(labels), theirs.float(), atol=1e-5, rtol=1e-5)


def test_the_cache_is_bounded_least_recently_used_first():
    cache = LabelCache(capacity=2)
    cache.put(["a", "b"], np.eye(2, dtype=np.float32))
    cache.get(["a"], {})  # a is now the most recently used
    cache.put(["c"], np.ones((1, 2), dtype=np.float32))
    assert cache.missing(["a", "b", "c"]) == ["b"]
    assert len(cache) == 2


def test_bad_labels_are_invalid(engine):
    for labels, field in (([], "labels"), (["person", ""], "labels[1]"), (["x" * 300], "labels[0]")):
        with pytest.raises(InvalidRequest) as info:
            engine.extract_sync("bi/bert", ["Ada Lovelace lived in London."], labels)
        assert info.value.field == field


def test_a_label_may_hold_the_uni_encoders_prompt_token(engine, models):
    """A bi-encoder's labels are not in the text's prompt: `<<ENT>>` in a label is just text."""
    _, reference = models["bert"]
    labels = ["person <<ENT>>", "location"]
    result = engine.extract_sync("bi/bert", TEXTS[:1], labels, threshold=0.3)
    assert_same(result.items[0].entities, reference.predict_entities(TEXTS[0], labels, threshold=0.3))


@pytest.mark.parametrize("config, message", [
    (dict(labels_encoder="BAAI/bge-small-en-v1.5", span_mode="token_level",
          labels_encoder_config={"model_type": "bert"}), "bi-encoder token model"),
    (dict(model_type="gliner_bi_encoder_token", labels_encoder="BAAI/bge-small-en-v1.5",
          labels_encoder_config={"model_type": "bert"}), "gliner_bi_encoder_token"),
    (dict(labels_encoder="BAAI/bge-small-en-v1.5"), "labels_encoder_config is missing"),
    (dict(labels_encoder="x", labels_encoder_config={"model_type": "bert"}, post_fusion_schema="l2l-l2t"),
     "post_fusion_schema"),
])
def test_bi_encoders_sie_does_not_compute_are_refused(config, message):
    with pytest.raises(ValueError, match=message):
        GlinerConfig.from_dict(config)


def test_the_saved_config_reads_as_a_bi_encoder(models):
    root, _ = models["bert"]
    config = GlinerConfig.from_dict(json.loads((root / "gliner_config.json").read_text()))
    assert config.bi_encoder and config.labels_encoder_config["hidden_size"] == 48


BI_CARDS = {  # the built-in bi-encoder cards, by the VARIANTS stand-in of their text encoder's family
    "modernbert": ["knowledgator/gliner-bi-edge-v2.0", "knowledgator/gliner-bi-small-v2.0",
                   "knowledgator/gliner-bi-base-v2.0", "knowledgator/gliner-bi-large-v2.0",
                   "knowledgator/modern-gliner-bi-base-v1.0", "knowledgator/modern-gliner-bi-large-v1.0"],
    "deberta": ["Ihor/gliner-biomed-bi-small-v1.0", "Ihor/gliner-biomed-bi-base-v1.0",
                "Ihor/gliner-biomed-bi-large-v1.0", "knowledgator/gliner-bi-small-v1.0",
                "knowledgator/gliner-bi-base-v1.0", "knowledgator/gliner-bi-large-v1.0"],
}
FAMILIES = {"modernbert": "modernbert", "deberta": "deberta-v2"}


@pytest.mark.parametrize("variant", list(BI_CARDS))
def test_the_bi_encoder_cards_load_from_themselves_on_a_stand_in(models, variant):
    """Each built-in bi-encoder card on the tiny bi-encoder of its text encoder's family (a ModernBERT,
    or the DeBERTa-v3 the gliner-biomed bi-encoders use): it builds from the card alone, and answers
    as gliner does."""
    import dataclasses

    builtin = Catalog.builtin()
    root, reference = models[variant]
    cards = [dataclasses.replace(builtin.get(name), weights=WeightsSource(path=str(root)))
             for name in BI_CARDS[variant]]
    with Engine(Catalog(cards), device="cpu") as engine:
        for card in cards:
            assert card.family == FAMILIES[variant] and card.outputs == ("extract",)
            result = engine.extract_sync(card.id, TEXTS[:2], LABELS, threshold=0.3)
            for text, item in zip(TEXTS, result.items):
                assert_same(item.entities, reference.predict_entities(text, LABELS, threshold=0.3))
