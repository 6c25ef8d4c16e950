"""SIE's packed ModernBERT against transformers' ModernBertModel on the same weights.

Tolerances: float32 hidden states and pooled outputs within 1e-4 absolute; bfloat16
(SIE) against float32 (transformers) within 6e-2 absolute on hidden states (LayerNorm
outputs of unit scale, i.e. a few bf16 ulps accumulated over 3 layers) and a cosine
similarity of at least 0.999 on pooled outputs.

The tiny model has a local window of 8 (4 tokens each side) and the test texts run
to ~70 tokens, so the sliding-window layers are exercised, not just the global one.
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
from sie_engine.models.modernbert.model import ModernBertConfig

LOCAL_ATTENTION = 8


def tiny_modernbert_config(**overrides):
    from transformers import ModernBertConfig as HFConfig

    config = dict(
        vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=512, local_attention=LOCAL_ATTENTION, global_attn_every_n_layers=3,
        pad_token_id=0, bos_token_id=101, cls_token_id=101, eos_token_id=102, sep_token_id=102,
        global_rope_theta=160000.0, local_rope_theta=10000.0,
    )
    config.update(overrides)
    return HFConfig(**config)


@pytest.fixture(scope="module", params=["plain", "biases"])
def model_dir(request, tmp_path_factory):
    """(directory, reference model). "biases" turns on every optional bias (norms, attention, MLP)."""
    from transformers import ModernBertModel

    torch.manual_seed(0)
    extra = dict(norm_bias=True, attention_bias=True, mlp_bias=True) if request.param == "biases" else {}
    model = ModernBertModel(tiny_modernbert_config(**extra)).eval()
    if extra:  # transformers initialises biases to zero: make them count
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.normal_(0, 0.1)
    return save_tiny(model, tmp_path_factory.mktemp(f"modernbert_{request.param}")), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0])


@pytest.fixture(scope="module")
def token_ids(runner):
    ids = runner.tokenizer.encode(TEXTS).ids
    assert max(len(x) for x in ids) > 4 * LOCAL_ATTENTION  # windows really cut attention
    return ids


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    check_every_weight_loaded(runner, model_dir[0])
    state = model_dir[1].state_dict()
    for name, param in runner.backbone.named_parameters():
        torch.testing.assert_close(param.detach(), state[name], atol=0, rtol=0)


def test_hidden_states_and_pooling_match_transformers(runner, model_dir, token_ids):
    expected = reference_hidden(model_dir[1], token_ids)
    got = sie_hidden(runner, token_ids)
    assert max_abs_diff(got, expected) < FP32_TOL
    for pooling in ("cls", "mean"):
        pooled_runner = runner_for(model_dir[0], pooling=pooling)
        np.testing.assert_allclose(sie_pooled(pooled_runner, token_ids), reference_pooled(expected, pooling),
                                   atol=FP32_TOL, rtol=0)


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], pooling="mean", dtype="bfloat16")
    expected = reference_hidden(model_dir[1], token_ids)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < 6e-2
    assert cosine(sie_pooled(runner, token_ids), reference_pooled(expected, "mean")).min() > 0.999


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def test_engine_end_to_end_with_query_template(model_dir):
    """Engine API: template applied to queries only, card pooling (CLS) and normalisation."""
    root, reference = model_dir
    card = tiny_card(root, pooling="cls", id="tiny/modernbert", normalize=True,
                     query_template="search_query: {text}", document_template="search_document: {text}")
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(root))
    engine = Engine(Catalog([card]), device="cpu")
    try:
        for is_query, prefix in ((True, "search_query: "), (False, "search_document: ")):
            result = engine.encode_sync(card.id, TEXTS, is_query=is_query)
            got = np.stack([item.dense for item in result.items])
            ids = [np.asarray(x) for x in hf_tok([prefix + t for t in TEXTS])["input_ids"]]
            expected = reference_pooled(reference_hidden(reference, ids), "cls")
            expected /= np.linalg.norm(expected, axis=1, keepdims=True)
            np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)
    finally:
        engine.close()


def test_config_reads_hub_layout_and_new_layout():
    """Checkpoints on the hub predate transformers 5 (global_attn_every_n_layers, *_rope_theta);
    both layouts give the same typed config."""
    hub = dict(vocab_size=100, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48,
               global_attn_every_n_layers=2, global_rope_theta=80000.0, local_rope_theta=5000.0, local_attention=16)
    new = tiny_modernbert_config(vocab_size=100, num_hidden_layers=4, global_attn_every_n_layers=2,
                                 global_rope_theta=80000.0, local_rope_theta=5000.0, local_attention=16).to_dict()
    a, b = ModernBertConfig.from_hf(hub), ModernBertConfig.from_hf(new)
    assert a.layer_types == b.layer_types == ("full_attention", "sliding_attention") * 2
    assert (a.global_rope_theta, a.local_rope_theta) == (b.global_rope_theta, b.local_rope_theta) == (80000.0, 5000.0)
    with pytest.raises(ValueError, match="rope_type"):
        ModernBertConfig.from_hf({**new,
                                  "rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1.0}}})
