"""SIE's packed NomicBERT against transformers' NomicBertModel on the same weights.

transformers (>= 5) carries NomicBERT's modeling code, and its save_pretrained writes
Nomic's original checkpoint names (emb_ln, attn.Wqkv, mlp.fc11/fc12/fc2, norm1/norm2),
the layout of nomic-embed-text on the hub; SIE reads those names directly.

Tolerances: float32 hidden states and pooled outputs within 1e-4 absolute; bfloat16
(SIE) against float32 (transformers) within 6e-2 absolute on hidden states (post-norm
outputs of unit scale) and a cosine similarity of at least 0.999 on pooled outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arch_fixtures import (
    FP32_TOL,
    MINILM_VOCAB,
    TEXTS,
    check_batch_invariance,
    check_every_weight_loaded,
    cosine,
    max_abs_diff,
    reference_hidden,
    reference_pooled,
    runner_for,
    save_tiny,
    sie_hidden,
    sie_pooled,
    tiny_card,
)
from sie_engine import Catalog, Engine
from sie_engine.models.nomic_bert.model import NomicBertConfig

# nomic-embed-text-v1.5's config.json (Nomic's own layout), shrunk: the keys SIE must read.
HUB_CONFIG = {
    "activation_function": "swiglu", "architectures": ["NomicBertModel"], "causal": False, "layer_norm_epsilon": 1e-12,
    "mlp_fc1_bias": False, "mlp_fc2_bias": False, "model_type": "nomic_bert", "n_embd": 32, "n_head": 4, "n_inner": 48,
    "n_layer": 2, "n_positions": 8192, "prenorm": False, "qkv_proj_bias": False, "rotary_emb_base": 1000,
    "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False, "rotary_scaling_factor": None, "type_vocab_size": 2,
    "use_rms_norm": False, "vocab_size": MINILM_VOCAB, "parallel_block": False,
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import NomicBertConfig as HFConfig
    from transformers import NomicBertModel

    torch.manual_seed(0)
    config = HFConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=48, max_position_embeddings=512)
    model = NomicBertModel(config).eval()
    with torch.no_grad():  # LayerNorms start at (1, 0): make them count
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layernorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return save_tiny(model, tmp_path_factory.mktemp("nomic_bert")), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0])


@pytest.fixture(scope="module")
def token_ids(runner):
    return runner.tokenizer.encode(TEXTS).ids


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    check_every_weight_loaded(runner, model_dir[0])
    from safetensors.torch import load_file

    saved = load_file(str(model_dir[0] / "model.safetensors"))
    for name, param in runner.backbone.named_parameters():
        torch.testing.assert_close(param.detach(), saved[name], atol=0, rtol=0)


def test_hidden_states_and_pooling_match_transformers(runner, model_dir, token_ids):
    expected = reference_hidden(model_dir[1], token_ids)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < FP32_TOL
    for pooling in ("mean", "cls"):
        np.testing.assert_allclose(sie_pooled(runner_for(model_dir[0], pooling=pooling), token_ids),
                                   reference_pooled(expected, pooling), atol=FP32_TOL, rtol=0)


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], dtype="bfloat16")
    expected = reference_hidden(model_dir[1], token_ids)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < 6e-2
    assert cosine(sie_pooled(runner, token_ids), reference_pooled(expected, "mean")).min() > 0.999


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def test_engine_end_to_end_with_prefixes(model_dir):
    """Engine API with a nomic-embed-text-style card (search_query: / search_document: prefixes)."""
    root, reference = model_dir
    card = tiny_card(root, pooling="mean", id="tiny/nomic", normalize=True,
                     query_template="search_query: {text}", document_template="search_document: {text}")
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(root))
    engine = Engine(Catalog([card]), device="cpu")
    try:
        for is_query, prefix in ((True, "search_query: "), (False, "search_document: ")):
            got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS, is_query=is_query).items])
            ids = [np.asarray(x) for x in hf_tok([prefix + t for t in TEXTS])["input_ids"]]
            expected = reference_pooled(reference_hidden(reference, ids), "mean")
            np.testing.assert_allclose(got, expected / np.linalg.norm(expected, axis=1, keepdims=True),
                                       atol=FP32_TOL, rtol=0)
    finally:
        engine.close()


def test_config_reads_nomic_layout_like_transformers_layout(model_dir):
    ported = NomicBertConfig.from_hf(model_dir[1].config.to_dict())
    original = NomicBertConfig.from_hf(HUB_CONFIG)
    for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "hidden_act", "type_vocab_size", "layer_norm_eps", "rope_theta"):
        assert getattr(ported, field) == getattr(original, field), field
    assert original.max_seq_len == 8192
    with pytest.raises(ValueError, match="rotary_emb_fraction"):
        NomicBertConfig.from_hf({**HUB_CONFIG, "rotary_emb_fraction": 0.5})
    with pytest.raises(ValueError, match="activation_function"):
        NomicBertConfig.from_hf({**HUB_CONFIG, "activation_function": "gelu"})


def test_local_directory_card_reads_nomic_window(tmp_path):
    """`--model NAME=PATH` on a checkpoint in Nomic's layout: the window comes from n_positions."""
    import json

    from sie_engine import card_from_local_dir

    (tmp_path / "config.json").write_text(json.dumps(HUB_CONFIG))
    card = card_from_local_dir("local/nomic", tmp_path)
    assert card.max_seq_len == 8192 and card.pooling == "mean"
