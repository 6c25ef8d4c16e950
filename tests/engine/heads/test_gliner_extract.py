"""GLiNER extraction against the `gliner` library's `predict_entities` on the same weights.

Reference models are GLiNERs built from config (backbone: the real MiniLM, or a tiny
random BERT) with random span heads, saved with `save_pretrained` and reloaded with
`GLiNER.from_pretrained`; SIE serves the very same directory. The heads' random
weights are scaled so probabilities spread over (0, 1) (GLiNER's own init puts every
score near 0.5, where the comparison would test nothing).
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest, UnsupportedTask
from sie_engine.models.gliner.checkpoint import load_gliner_config
from sie_engine.models.gliner.decode import Span, greedy
from sie_engine.models.gliner.prompt import class_token_id, prepare
from sie_engine.tokenizer import TextTokenizer
from tiny_models import MINILM_DIR, make_tiny_bert

LABELS = ["person", "location", "organization", "programming language"]
TEXTS = [
    "Barack Obama was born in Hawaii and worked with Google in Mountain View, California.",
    "Guido van Rossum created Python; Angela Merkel met him in Berlin  and\nZürich.",
    "The e-mail from São Paulo's city_hall (sent 3.14 hours ago!) named Jean-Luc Picard.",
    "Linus wrote Linux in C at the University of Helsinki.",
    "naïve café owner Ada Lovelace 🙂 visited Toronto",
]
VARIANTS = {
    # backbone, GLiNER settings: together they cover every span mode, pooling, LSTM depth,
    # the projection (present when widths differ), and embed_ent_token both ways
    "minilm-markerV0-first": ("minilm", {}),
    "tiny-marker-mean": ("tiny", dict(hidden_size=32, span_mode="marker", subtoken_pooling="mean", num_rnn_layers=0,
                                      embed_ent_token=False, max_width=5)),
    "tiny-markerV1-max": ("tiny", dict(hidden_size=48, span_mode="markerV1", subtoken_pooling="max", num_rnn_layers=2,
                                       max_width=8)),
    "tiny-markerV0-last": ("tiny", dict(hidden_size=40, subtoken_pooling="last", max_width=6)),
    # token model (NuNER Zero's kind): start / end / inside per word and label
    "tiny-token-level": ("tiny", dict(hidden_size=32, span_mode="token_level", embed_ent_token=False)),
}
CALIBRATION_TEXT = TEXTS[0] + " " + TEXTS[1]


def build_reference(dest: Path, backbone: Path, seed: int = 0, **settings):
    """A GLiNER with a random span head, saved to `dest` and reloaded from it (the reference)."""
    from gliner import GLiNER, GLiNERConfig

    torch.manual_seed(seed)
    model = GLiNER.from_config(GLiNERConfig(model_name=str(backbone), **settings), backbone_from_pretrained=True)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.model.named_parameters():
            if not name.startswith(("token_rep_layer.bert_layer", "token_rep_layer.labels_encoder")):  # encoders
                scale = 1.0 / math.sqrt(param.shape[1]) if param.dim() >= 2 else 0.1
                param.copy_(torch.randn(param.shape, generator=generator) * scale)
        if settings.get("span_mode") == "token_level":
            calibrate_token_scorer(model)
            model.save_pretrained(dest)
            return GLiNER.from_pretrained(str(dest), local_files_only=True)
        # centre span vectors, then scale label vectors so logits have a spread of about 3
        captured = []
        hook = model.model.span_rep_layer.register_forward_hook(lambda mod, inp, out: captured.append(out))
        model.predict_entities(CALIBRATION_TEXT, LABELS[:2], threshold=0.0)
        hook.remove()
        out_project = model.model.span_rep_layer.span_rep_layer.out_project
        last = out_project[3] if isinstance(out_project, torch.nn.Sequential) else out_project
        last.bias.sub_(captured[0].reshape(-1, captured[0].shape[-1]).mean(0))
        found = model.predict_entities(CALIBRATION_TEXT, LABELS[:2], threshold=0.0, flat_ner=False, multi_label=True)
        scores = np.clip([e["score"] for e in found], 1e-7, 1 - 1e-7)
        alpha = 3.0 / np.log(scores / (1 - scores)).std()
        model.model.prompt_rep_layer[3].weight.mul_(alpha)
        model.model.prompt_rep_layer[3].bias.mul_(alpha)
    model.save_pretrained(dest)
    return GLiNER.from_pretrained(str(dest), local_files_only=True)


def calibrate_token_scorer(model) -> None:
    """Token models: centre each of the start / end / inside logits and give them a spread of 3."""
    captured = []
    hook = model.model.scorer.register_forward_hook(lambda mod, inp, out: captured.append(out))
    model.predict_entities(CALIBRATION_TEXT, LABELS[:2], threshold=0.0)
    hook.remove()
    logits = captured[0].reshape(-1, 3)
    last = model.model.scorer.out_mlp[3]
    last.bias.sub_(logits.mean(0))
    alpha = 3.0 / logits.std(0)
    last.weight.mul_(alpha[:, None])
    last.bias.mul_(alpha)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """variant -> (directory, reference GLiNER)."""
    tmp = tmp_path_factory.mktemp("gliner")
    tiny = make_tiny_bert(tmp / "tiny-bert", seed=3)
    built = {}
    for seed, (name, (backbone, settings)) in enumerate(VARIANTS.items()):
        root = tmp / name
        reference = build_reference(root, MINILM_DIR if backbone == "minilm" else tiny, seed=seed, **settings)
        built[name] = (root, reference)
    return built


WINDOW_TOKENS = 40  # a small window, so a paragraph needs several


def cards_for(models) -> list[ModelCard]:
    cards = []
    for name, (root, _) in models.items():
        cards.append(ModelCard(id=f"gliner/{name}", weights=WeightsSource(path=str(root)), outputs=("extract",),
                               max_seq_len=512, max_batch_tokens=2048))
        cards.append(ModelCard(id=f"gliner/{name}/window", weights=WeightsSource(path=str(root)), outputs=("extract",),
                               max_seq_len=WINDOW_TOKENS, max_batch_tokens=512))
    cards.append(ModelCard(id="dense", weights=WeightsSource(path=str(MINILM_DIR)), max_seq_len=128))
    return cards


@pytest.fixture(scope="module")
def engine(models):
    engine = Engine(Catalog(cards_for(models)), device="cpu")
    yield engine
    engine.close()


def as_tuples(entities) -> list[tuple]:
    return [(e["start"], e["end"], e["text"], e["label"]) if isinstance(e, dict) else (e.start, e.end, e.text, e.label)
            for e in entities]


def assert_same(ours, reference) -> None:
    assert as_tuples(ours) == as_tuples(reference)
    for mine, theirs in zip(ours, reference):
        assert abs(mine.score - theirs["score"]) < 1e-4


@pytest.mark.parametrize("flat", [True, False], ids=["flat", "nested"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_matches_predict_entities(engine, models, variant, flat):
    _, reference = models[variant]
    result = engine.extract_sync(f"gliner/{variant}", TEXTS, LABELS, threshold=0.5, flat=flat)
    total = 0
    for text, item in zip(TEXTS, result.items):
        expected = reference.predict_entities(text, LABELS, flat_ner=flat, threshold=0.5)
        assert_same(item.entities, expected)
        for entity in item.entities:
            assert text[entity.start:entity.end] == entity.text
        total += len(expected)
    assert total >= 5, "the comparison must cover real entities"
    assert [item.id for item in result.items] == [str(i) for i in range(len(TEXTS))]


def test_multi_label_and_threshold(engine, models):
    _, reference = models["minilm-markerV0-first"]
    for threshold, flat in ((0.3, False), (0.8, True)):
        result = engine.extract_sync("gliner/minilm-markerV0-first", TEXTS[:3], LABELS, threshold=threshold, flat=flat,
                                     multi_label=True)
        for text, item in zip(TEXTS, result.items):
            expected = reference.predict_entities(text, LABELS, flat_ner=flat, threshold=threshold, multi_label=True)
            assert_same(item.entities, expected)


def long_text() -> str:
    return " ".join(TEXTS[i % len(TEXTS)] for i in range(7))  # ~100 words, many windows of 40 tokens


def reference_candidates(reference, text: str, threshold: float) -> list[tuple[int, int, int, float]]:
    """GLiNER's own candidates for one text (before its greedy search), in its candidate order:
    (start word, width, label index, score)."""
    prepared = reference.prepare_batch([text], LABELS)
    batch = reference.collate_batch(prepared["input_x"], prepared["entity_types"])
    logits = reference.run_batch(batch, threshold=threshold).logits[0]
    if reference.config.span_mode == "token_level":  # [W, C, 3]: GLiNER's TokenDecoder pieces
        decoder = reference.decoder
        start, end, inside = logits.permute(2, 0, 1)
        spans = decoder._calculate_span_score(
            decoder._get_indices_above_threshold(start, threshold),
            decoder._get_indices_above_threshold(end, threshold),
            torch.sigmoid(inside), torch.sigmoid(start), torch.sigmoid(end),
            {i + 1: label for i, label in enumerate(LABELS)}, threshold)
        return [(s.start, s.end - s.start, LABELS.index(s.entity_type), s.score) for s in spans]
    probs = torch.sigmoid(logits)  # [L, K, C]
    starts, widths, labels = torch.where(probs > threshold)
    num_words = len(prepared["tokens"][0])
    return [(s, k, c, probs[s, k, c].item()) for s, k, c in zip(starts.tolist(), widths.tolist(), labels.tolist())
            if s + k < num_words]


def windowed_reference(reference, root: Path, text: str, flat: bool, threshold: float):
    """GLiNER on each of SIE's windows (as plain texts): its candidates whose start lies in the
    window's core, pooled over the text and decoded with GLiNER's greedy search."""
    from gliner.decoding.decoder import Span as GSpan
    from gliner.decoding.decoder import SpanDecoder

    config = load_gliner_config(root)
    tokenizer = TextTokenizer(root, WINDOW_TOKENS)
    prepared = prepare(tokenizer, config, [text], LABELS, class_token_id(tokenizer, config))
    words = prepared.words[0]
    union = []
    for window in prepared.windows:
        first, last = window.first_word, window.first_word + window.num_words - 1
        window_text = text[words.starts[first]:words.ends[last]]
        for start, width, label, score in reference_candidates(reference, window_text, threshold):
            if window.core[0] <= start + first < window.core[1]:
                union.append(GSpan(start + first, start + first + width, LABELS[label], score))
    if reference.config.span_mode == "token_level":
        union.sort(key=lambda s: (s.start, LABELS.index(s.entity_type), s.end))
    else:
        union.sort(key=lambda s: (s.start, s.end, LABELS.index(s.entity_type)))
    chosen = SpanDecoder(reference.config).greedy_search(union, flat_ner=flat)
    return prepared, [{"start": words.starts[s.start], "end": words.ends[s.end], "label": s.entity_type,
                       "score": s.score, "text": text[words.starts[s.start]:words.ends[s.end]]} for s in chosen]


@pytest.mark.parametrize("flat", [True, False], ids=["flat", "nested"])
@pytest.mark.parametrize("variant", ["minilm-markerV0-first", "tiny-markerV1-max", "tiny-token-level"])
def test_long_text_windows(engine, models, variant, flat):
    root, reference = models[variant]
    text = long_text()
    prepared, expected = windowed_reference(reference, root, text, flat, 0.5)
    assert len(prepared.windows) >= 4
    assert all(len(w.ids) <= WINDOW_TOKENS and not w.truncated for w in prepared.windows)
    result = engine.extract_sync(f"gliner/{variant}/window", [text, TEXTS[0]], LABELS, threshold=0.5, flat=flat)
    assert_same(result.items[0].entities, expected)
    assert len(expected) >= 10
    # the short text next to it in the same request is one window, as without windows
    assert_same(result.items[1].entities, reference.predict_entities(TEXTS[0], LABELS, flat_ner=flat, threshold=0.5))


def test_usage_counts_window_tokens(engine):
    result = engine.extract_sync("gliner/tiny-marker-mean/window", [long_text()], LABELS)
    assert result.tokens > WINDOW_TOKENS * 4


@pytest.mark.parametrize("kwargs, field", [
    (dict(labels=[]), "labels"),
    (dict(labels="person"), "labels"),
    (dict(labels=["person", ""]), "labels[1]"),
    (dict(labels=["person", 3]), "labels[1]"),
    (dict(labels=["x" * 300]), "labels[0]"),
    (dict(labels=[f"label {i}" for i in range(65)]), "labels"),
    (dict(labels=["person <<ENT>>"]), "labels[0]"),
    (dict(threshold=1.5), "threshold"),
    (dict(threshold="high"), "threshold"),
    (dict(flat="yes"), "flat"),
    (dict(multi_label="yes"), "multi_label"),
    (dict(top_k=3), "top_k"),
    (dict(relation_labels=["works_for"]), "relation_labels"),  # GLiNER2 models only
    (dict(classify={"task": "topic", "labels": ["a"]}), "classify"),
    (dict(items=[{"text": 7}]), "items[0].text"),
    (dict(items=[]), "items"),
])
def test_bad_requests_are_invalid(engine, kwargs, field):
    call = dict(items=["Ada Lovelace lived in London."], labels=["person"])
    call.update(kwargs)
    with pytest.raises(InvalidRequest) as info:
        engine.extract_sync("gliner/tiny-marker-mean", call.pop("items"), call.pop("labels"), **call)
    assert info.value.field == field


def test_labels_that_fill_the_window_are_invalid(engine):
    labels = [f"a rather long label number {i}" for i in range(8)]
    with pytest.raises(InvalidRequest, match="fewer or shorter labels"):
        engine.extract_sync("gliner/tiny-marker-mean/window", ["Ada Lovelace lived in London."], labels)


def test_extract_needs_an_extract_model(engine):
    with pytest.raises(UnsupportedTask):
        engine.extract_sync("dense", ["Ada Lovelace"], ["person"])


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("flat", [True, False])
def test_greedy_matches_gliner(flat, multi_label):
    """SIE's greedy selection against GLiNER's on random candidates, ties included."""
    from gliner.decoding.decoder import Span as GSpan
    from gliner.decoding.decoder import SpanDecoder

    decoder = SpanDecoder(None)
    rng = random.Random(7)
    for _ in range(200):
        spans = []
        for start in range(12):
            for width in range(4):
                for label in range(3):
                    if rng.random() < 0.3:
                        spans.append(Span(start, start + width, label, rng.choice([0.6, 0.7, 0.8, 0.9, rng.random()])))
        ours = greedy(spans, flat, multi_label)
        theirs = decoder.greedy_search([GSpan(s.start, s.end, s.label, s.score) for s in spans], flat, multi_label)
        assert [(s.start, s.end, s.label, s.score) for s in ours] == \
            [(s.start, s.end, s.entity_type, s.score) for s in theirs]


def hub_cache_layout(cache: Path, repo: str, files: Path) -> None:
    """Lay a directory out as the Hugging Face hub cache holds a downloaded repository."""
    snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / "0123456789abcdef"
    shutil.copytree(files, snapshot)
    (cache / f"models--{repo.replace('/', '--')}" / "refs").mkdir()
    (cache / f"models--{repo.replace('/', '--')}" / "refs" / "main").write_text("0123456789abcdef")


def test_hub_checkpoint_in_the_older_layout(models, tmp_path, monkeypatch):
    """A GLiNER save as the hub holds older ones: pytorch_model.bin, no backbone config and no
    tokenizer (both from `model_name`, with GLiNER's tokens added), served by hub id offline."""
    import huggingface_hub.constants as hub_constants
    from gliner import GLiNER

    root, _ = models["tiny-marker-mean"]
    old = tmp_path / "old"
    old.mkdir()
    config = json.loads((root / "gliner_config.json").read_text())
    backbone = tmp_path / "backbone"
    shutil.copytree(Path(config["encoder_config"]["_name_or_path"]), backbone)
    for key in ("encoder_config", "class_token_index", "vocab_size"):
        config.pop(key, None)
    config["model_name"] = str(backbone)
    (old / "gliner_config.json").write_text(json.dumps(config))
    shutil.copy(root / "pytorch_model.bin", old / "pytorch_model.bin")
    reference = GLiNER.from_pretrained(str(old), local_files_only=True)

    cache = tmp_path / "hub"
    hub_cache_layout(cache, "someone/gliner-old", old)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    card = ModelCard(id="someone/gliner-old", weights=WeightsSource(hub="someone/gliner-old"), outputs=("extract",))
    with Engine(Catalog([card]), device="cpu") as engine:
        result = engine.extract_sync("someone/gliner-old", TEXTS[:2], LABELS, flat=False)
    for text, item in zip(TEXTS, result.items):
        assert_same(item.entities, reference.predict_entities(text, LABELS, flat_ner=False))


def test_missing_head_tensor_fails_the_load_naming_it(models, tmp_path):
    from sie_engine.errors import ModelLoadFailed

    root, _ = models["tiny-marker-mean"]
    broken = tmp_path / "broken"
    shutil.copytree(root, broken)
    state = torch.load(broken / "pytorch_model.bin", weights_only=True)
    del state["prompt_rep_layer.3.bias"]
    torch.save(state, broken / "pytorch_model.bin")
    card = ModelCard(id="broken", weights=WeightsSource(path=str(broken)), outputs=("extract",))
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(ModelLoadFailed, match="prompt.3.bias"):
            engine.extract_sync("broken", ["Ada Lovelace"], ["person"])


@pytest.mark.parametrize("variant", ["minilm-markerV0-first", "tiny-markerV1-max"])
def test_span_chunks_do_not_change_results(engine, models, variant, monkeypatch):
    """Span vectors are computed in chunks of whole windows; tiny chunks give the same answer."""
    import sie_engine.models.gliner.head as gliner_head

    _, reference = models[variant]
    monkeypatch.setattr(gliner_head, "SPAN_CHUNK", 40)
    result = engine.extract_sync(f"gliner/{variant}", TEXTS, LABELS, threshold=0.5, flat=False)
    for text, item in zip(TEXTS, result.items):
        assert_same(item.entities, reference.predict_entities(text, LABELS, flat_ner=False, threshold=0.5))


def test_extract_card_over_a_plain_model_fails_as_a_load_failure(tmp_path):
    from sie_engine.errors import ModelLoadFailed

    card = ModelCard(id="not-gliner", weights=WeightsSource(path=str(MINILM_DIR)), outputs=("extract",))
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(ModelLoadFailed, match="GLiNER checkpoint"):
            engine.extract_sync("not-gliner", ["Ada Lovelace"], ["person"])


@pytest.mark.parametrize("variant", ["tiny-markerV0-last", "tiny-token-level"])
def test_reference_candidates_reproduce_predict_entities(models, variant):
    """The windowed reference above uses GLiNER's internals; on one text they give predict_entities."""
    from gliner.decoding.decoder import Span as GSpan
    from gliner.decoding.decoder import SpanDecoder

    from sie_engine.models.gliner.prompt import split_words

    _, reference = models[variant]
    for text in TEXTS:
        words = split_words(text)
        spans = [GSpan(s, s + k, LABELS[c], p) for s, k, c, p in reference_candidates(reference, text, 0.5)]
        chosen = SpanDecoder(reference.config).greedy_search(spans, flat_ner=True)
        expected = reference.predict_entities(text, LABELS, threshold=0.5)
        assert [(words.starts[s.start], words.ends[s.end], s.entity_type, s.score) for s in chosen] == \
            [(e["start"], e["end"], e["label"], e["score"]) for e in expected]


def test_one_batch_mixes_requests_with_their_own_labels_and_settings(models):
    """Windows of different requests (own labels, threshold, flat/nested) share one packed batch."""
    from sie_engine.models.gliner.decode import DecodeSettings
    from sie_engine.models.gliner.head import WindowWork
    from sie_engine.runner import build_runner
    from sie_engine.tasks.gliner import prepare_request
    from sie_engine.work import WorkItem

    root, reference = models["tiny-markerV1-max"]
    card = ModelCard(id="mix", weights=WeightsSource(path=str(root)), outputs=("extract",))
    runner = build_runner(card, root, torch.device("cpu"))
    requests = [(["person", "city"], DecodeSettings(0.5, True)), (LABELS, DecodeSettings(0.3, False)),
                (["organization"], DecodeSettings(0.6, True, multi_label=True))]
    items, expected = [], []
    for labels, settings in requests:
        prepared = prepare_request(runner.tokenizer, card, TEXTS[:3], labels)
        for window in prepared.windows:
            items.append(WorkItem(None, len(items), window.ids, outputs=frozenset({"extract"}),
                                  extra=WindowWork(window, settings)))
            text = TEXTS[window.item]
            expected.append((prepared.words[window.item], labels, reference.predict_entities(
                text, labels, flat_ner=settings.flat, threshold=settings.threshold, multi_label=settings.multi_label)))
    results = [r["extract"] for r in runner.run(items)]
    for spans, (words, labels, reference_entities) in zip(results, expected):
        assert [(words.starts[s.start], words.ends[s.end], labels[s.label]) for s in spans] == \
            [(e["start"], e["end"], e["label"]) for e in reference_entities]
        assert all(abs(s.score - e["score"]) < 1e-4 for s, e in zip(spans, reference_entities))


def test_stepwise_lstm_equals_the_packed_lstm():
    """The CPU's stepwise LSTM against torch's packed LSTM (the CUDA path), two layers."""
    from sie_engine.models.gliner.layers import Lstm

    torch.manual_seed(0)
    packed = Lstm(32, 2, stepwise=False).eval()
    stepwise = Lstm(32, 2, stepwise=True).eval()
    stepwise.load_state_dict(packed.state_dict())
    lengths = [7, 1, 30, 12, 30]
    words = torch.randn(sum(lengths), 32)
    keep = torch.from_numpy(np.arange(max(lengths))[None, :] < np.asarray(lengths)[:, None])
    with torch.inference_mode():
        torch.testing.assert_close(stepwise(words, lengths, keep), packed(words, lengths, keep), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("key", ["labels_decoder", "relations_layer", "post_fusion_schema"])
def test_a_gliner_variant_sie_does_not_compute_is_refused_naming_its_setting(key):
    """A checkpoint that switches on what SIE's head does not compute (a label decoder, a relation
    layer, fusion layers) is refused at load, naming the setting, not served with wrong scores
    (bi-encoders, with a labels encoder, are served: test_gliner_bi.py)."""
    from sie_engine.models.gliner.checkpoint import GlinerConfig

    with pytest.raises(ValueError, match=rf"gliner_config.json: {key}=.* is not supported by SIE"):
        GlinerConfig.from_dict({"max_width": 12, key: "something"})
