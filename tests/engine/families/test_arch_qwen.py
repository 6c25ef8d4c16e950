"""SIE's packed Qwen2/Qwen3 against transformers' Qwen2Model / Qwen3Model on the same weights.

Three variants: Qwen3 (per-head q/k norms, no biases), Qwen2 (q/k/v biases) and Qwen2
with `is_causal: false` (transformers' switch for bidirectional decoders). All use
grouped-query attention (4 query heads, 2 K/V heads); Qwen3's heads are wider than hidden / heads
(4 x 32 > 64), as in the real 0.6B (16 x 128 > 1024).

Tolerances: float32 hidden states and pooled outputs within 1e-4 absolute; bfloat16
(SIE) against float32 (transformers) within 0.15 absolute on hidden states (RMSNorm
outputs of scale ~1-3) and a cosine similarity of at least 0.999 on pooled outputs.
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
    make_norms_count,
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
from sie_engine.models import family_for
from sie_engine.models.qwen.model import QwenConfig

QWEN3_TEMPLATE = "Instruct: {instruction}\nQuery:{text}"
QWEN3_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"

# transformers tokenises a qwen2/qwen3 directory with its Qwen2Tokenizer class (over MiniLM's
# vocabulary: character pieces) and adds <|endoftext|> after the vocabulary: leave room for it.
QWEN_VOCAB = MINILM_VOCAB + 64


def tiny_qwen(kind: str):
    from transformers import Qwen2Config, Qwen2Model, Qwen3Config, Qwen3Model

    common = dict(vocab_size=QWEN_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512, rms_norm_eps=1e-6)
    if kind == "qwen3":
        return Qwen3Model(Qwen3Config(head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                                      **common))
    config = Qwen2Config(rope_parameters={"rope_type": "default", "rope_theta": 1e6}, **common)
    if kind == "qwen2-bidirectional":
        config.is_causal = False
    return Qwen2Model(config)


@pytest.fixture(scope="module", params=["qwen3", "qwen2", "qwen2-bidirectional"])
def model_dir(request, tmp_path_factory):
    torch.manual_seed(0)
    model = make_norms_count(tiny_qwen(request.param).eval(), biases=True)
    return save_tiny(model, tmp_path_factory.mktemp(request.param.replace("-", "_"))), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0], pooling="last")


@pytest.fixture(scope="module")
def token_ids(runner):
    return runner.tokenizer.encode(TEXTS).ids


def test_registry_and_config(runner, model_dir):
    config = model_dir[1].config
    assert family_for(config.to_dict()).name == config.model_type
    typed = runner.config
    assert (typed.num_attention_heads, typed.num_key_value_heads) == (4, 2)
    assert typed.qk_norm == (config.model_type == "qwen3")
    assert typed.qkv_bias == (config.model_type == "qwen2")
    assert typed.causal == getattr(config, "is_causal", True)
    assert typed.rope_theta == 1e6


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    check_every_weight_loaded(runner, model_dir[0])
    state = model_dir[1].state_dict()
    for name, param in runner.backbone.named_parameters():
        if "kv_proj" in name:
            expected = torch.cat([state[name.replace("kv_proj", p)] for p in ("k_proj", "v_proj")])
        elif "gate_up_proj" in name:
            expected = torch.cat([state[name.replace("gate_up_proj", p)] for p in ("gate_proj", "up_proj")])
        else:
            expected = state[name]
        torch.testing.assert_close(param.detach(), expected, atol=0, rtol=0)


def test_hidden_states_and_pooling_match_transformers(runner, model_dir, token_ids):
    expected = reference_hidden(model_dir[1], token_ids)
    got = sie_hidden(runner, token_ids)
    assert max_abs_diff(got, expected) < FP32_TOL
    np.testing.assert_allclose(sie_pooled(runner, token_ids), reference_pooled(expected, "last"), atol=FP32_TOL, rtol=0)
    mean_runner = runner_for(model_dir[0], pooling="mean")
    np.testing.assert_allclose(sie_pooled(mean_runner, token_ids), reference_pooled(expected, "mean"),
                               atol=FP32_TOL, rtol=0)


def test_causality_is_real(runner, model_dir, token_ids):
    """A causal model's first tokens do not depend on later ones: a prefix gives the same
    hidden states as the full sequence over the prefix's tokens; a bidirectional one does not."""
    ids = token_ids[1]
    full, prefix = sie_hidden(runner, [ids])[0], sie_hidden(runner, [ids[:10]])[0]
    same = torch.allclose(full[:10], prefix, atol=1e-5)
    assert same == runner.config.causal


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], pooling="last", dtype="bfloat16")
    expected = reference_hidden(model_dir[1], token_ids)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < 0.15
    assert cosine(sie_pooled(runner, token_ids), reference_pooled(expected, "last")).min() > 0.999


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def test_engine_end_to_end_with_instruction_template(model_dir):
    """Engine API with a Qwen3-Embedding-style card: instruct template and default instruction
    on queries, plain documents, last-token pooling, normalised; a request's instruction
    replaces the card's."""
    root, reference = model_dir
    card = tiny_card(root, pooling="last", id="tiny/qwen", normalize=True, query_template=QWEN3_TEMPLATE,
                     query_instruction=QWEN3_INSTRUCTION)
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(root))

    def expected(texts):
        ids = [np.asarray(x) for x in hf_tok(texts)["input_ids"]]
        pooled = reference_pooled(reference_hidden(reference, ids), "last")
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    engine = Engine(Catalog([card]), device="cpu")
    try:
        cases = [
            (dict(is_query=False), TEXTS),
            (dict(is_query=True), [QWEN3_TEMPLATE.format(instruction=QWEN3_INSTRUCTION, text=t) for t in TEXTS]),
            (dict(is_query=True, instruction="Find code"),
             [QWEN3_TEMPLATE.format(instruction="Find code", text=t) for t in TEXTS]),
        ]
        for options, templated in cases:
            got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS, **options).items])
            np.testing.assert_allclose(got, expected(templated), atol=FP32_TOL, rtol=0)
    finally:
        engine.close()


def test_unsupported_configs_are_refused_at_load():
    base = dict(model_type="qwen3", vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=8)
    with pytest.raises(ValueError, match="rope_type"):
        QwenConfig.from_hf({**base, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0}})
    with pytest.raises(ValueError, match="use_sliding_window"):
        QwenConfig.from_hf({**base, "use_sliding_window": True, "layer_types": ["sliding_attention"]})


def test_local_directory_card_pools_last_token(model_dir):
    """`--model NAME=PATH` on a Qwen checkpoint without a card: last-token pooling, and the
    engine serves it with the family read from config.json."""
    from sie_engine import card_from_local_dir

    card = card_from_local_dir("local/qwen", model_dir[0])
    assert card.pooling == "last" and card.family is None
    engine = Engine(Catalog([card]), device="cpu")
    try:
        got = engine.encode_sync(card.id, TEXTS[:2]).items[0].dense
        assert len(got) == model_dir[1].config.hidden_size
        assert engine.model_info(card.id).family == model_dir[1].config.model_type
    finally:
        engine.close()


def test_engine_equals_sentence_transformers_with_prompts(tmp_path):
    """The Qwen3-Embedding recipe as sentence-transformers runs it (Transformer, last-token
    Pooling, Normalize, a "query" prompt) against SIE's card (instruct template + default
    instruction, pooling: last) on the same tiny checkpoint: equal within 1e-4."""
    import json

    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = tiny_qwen("qwen3").eval()
    root = save_tiny(model, tmp_path)
    hidden = model.config.hidden_size
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False}))
    (root / "2_Normalize").mkdir()
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    (root / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": f"Instruct: {QWEN3_INSTRUCTION}\nQuery:", "document": ""}, "default_prompt_name": None}))
    st = SentenceTransformer(str(root), device="cpu")
    card = tiny_card(root, pooling="last", id="tiny/qwen3-st", normalize=True, query_template=QWEN3_TEMPLATE,
                     query_instruction=QWEN3_INSTRUCTION)
    engine = Engine(Catalog([card]), device="cpu")
    try:
        for is_query, expected in ((True, st.encode(TEXTS, prompt_name="query")), (False, st.encode(TEXTS))):
            got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS, is_query=is_query).items])
            np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)
    finally:
        engine.close()
