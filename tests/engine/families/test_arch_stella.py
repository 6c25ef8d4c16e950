"""stella_en_1.5B_v5 on the qwen2 family: a Qwen2 checkpoint whose own (remote) modeling code attends
bidirectionally although its config.json says nothing of it, mean pooling, then the Dense module
modules.json names (`2_Dense_1024`, one of several 2_Dense_<dims> folders), no Normalize.

The card says `options.backbone: {is_causal: false}`; this module checks, on tiny random weights,
that SIE then equals sentence-transformers running the same layout over transformers' Qwen2Model
with `is_causal = False` (the published modeling's behaviour), that the other 2_Dense_* folders are
ignored, and that without the override SIE follows config.json (causal). Tolerance 1e-4 (float32).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from arch_fixtures import FP32_TOL, MINILM_VOCAB, TEXTS, make_norms_count, save_tiny, tiny_card
from sie_engine import Catalog, Engine

S2P_QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query.\nQuery: "
DIMS = {"2_Dense_256": 24, "2_Dense_1024": 40}  # folder -> out_features; modules.json names 2_Dense_1024


def _stella_layout(root, hidden: int) -> None:
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(7)
    for folder, out in DIMS.items():
        (root / folder).mkdir()
        (root / folder / "config.json").write_text(json.dumps(
            {"in_features": hidden, "out_features": out, "bias": True,
             "activation_function": "torch.nn.modules.linear.Identity"}))
        save_file({"linear.weight": torch.randn(out, hidden, generator=generator) / hidden ** 0.5,
                   "linear.bias": torch.randn(out, generator=generator) * 0.1},
                  str(root / folder / "model.safetensors"))
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense_1024", "type": "sentence_transformers.models.Dense"},
    ]))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True}))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    (root / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"s2p_query": S2P_QUERY}, "default_prompt_name": None}))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2Model

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=MINILM_VOCAB + 64, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    model = make_norms_count(Qwen2Model(config).eval(), biases=True)
    root = save_tiny(model, tmp_path_factory.mktemp("stella"))
    assert "is_causal" not in json.loads((root / "config.json").read_text())  # as stella's config.json
    _stella_layout(root, config.hidden_size)
    return root


def _reference(root, causal: bool):
    """sentence-transformers over the checkpoint, its Qwen2Model switched as stella's code runs it."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(root), device="cpu")
    backbone = st[0].auto_model
    backbone.config.is_causal = causal
    for layer in backbone.layers:
        layer.self_attn.is_causal = causal
    return st


def _card(root, **fields):
    return tiny_card(root, pooling="mean", id=fields.pop("id", "tiny/stella"), normalize=False, family="qwen2",
                     query_template=S2P_QUERY + "{text}", **fields)


def test_bidirectional_stella_equals_sentence_transformers(root):
    st = _reference(root, causal=False)
    card = _card(root, options={"backbone": {"is_causal": False}})
    with Engine(Catalog([card]), device="cpu") as engine:
        for is_query, expected in ((True, st.encode(TEXTS, prompt_name="s2p_query")), (False, st.encode(TEXTS))):
            got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS, is_query=is_query).items])
            assert got.shape == (len(TEXTS), DIMS["2_Dense_1024"])  # the Dense modules.json names, not 2_Dense_256
            np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)


def test_without_the_override_config_json_decides(root):
    """No options.backbone: causal, as config.json implies; and so different from the bidirectional run."""
    causal = _reference(root, causal=True).encode(TEXTS)
    with Engine(Catalog([_card(root, id="tiny/causal")]), device="cpu") as engine:
        got = np.stack([item.dense for item in engine.encode_sync("tiny/causal", TEXTS).items])
    np.testing.assert_allclose(got, causal, atol=FP32_TOL, rtol=0)
    assert np.abs(got - _reference(root, causal=False).encode(TEXTS)).max() > 1e-3


def test_a_malformed_override_is_refused_at_load(root):
    card = _card(root, id="tiny/bad", options={"backbone": ["is_causal", False]})
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(Exception, match="options.backbone"):
            engine.encode_sync("tiny/bad", ["x"])
