"""SIE's packed Gemma 3 text model against transformers' Gemma3TextModel on the same tiny random
weights, bidirectional (EmbeddingGemma) and causal, and the EmbeddingGemma recipe (its prompts,
mean pooling, two Dense layers, Normalize) against sentence-transformers.

The tiny configs keep what makes Gemma 3 differ: heads wider than hidden / heads, grouped K/V,
query_pre_attn_scalar unlike head_dim, local layers with a window shorter than the texts and
their own rotary base, a global layer, norm weights away from zero (they are offsets from one).
Tolerances: float32 within 1e-4 absolute; bfloat16 (SIE) against float32 (transformers) a
cosine of at least 0.999 on pooled outputs.
"""

from __future__ import annotations

import json

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
from sie_engine.models import family_for
from sie_engine.models.gemma3.model import Gemma3TextConfig

QUERY_PROMPT, DOCUMENT_PROMPT = "task: search result | query: ", "title: none | text: "
WINDOW = 8  # config.json's sliding_window: local layers see 4 tokens each side (bidirectional)


def tiny_gemma3(bidirectional: bool):
    from transformers import Gemma3TextConfig as HFConfig
    from transformers import Gemma3TextModel as HFModel

    config = HFConfig(
        vocab_size=MINILM_VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=96, max_position_embeddings=512, query_pre_attn_scalar=24,
        sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        use_bidirectional_attention=bidirectional, hidden_activation="gelu_pytorch_tanh", pad_token_id=0,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    model = HFModel(config).eval()
    with torch.no_grad():  # norm weights are offsets from one, initialised to 0: make them count
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model


@pytest.fixture(scope="module", params=["bidirectional", "causal"])
def model_dir(request, tmp_path_factory):
    torch.manual_seed(0)
    model = tiny_gemma3(request.param == "bidirectional")
    return save_tiny(model, tmp_path_factory.mktemp(f"gemma3_{request.param}")), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0], pooling="mean")


@pytest.fixture(scope="module")
def token_ids(runner):
    ids = runner.tokenizer.encode(TEXTS).ids
    assert max(len(x) for x in ids) > 2 * WINDOW  # local windows cut the longer texts
    return ids


def test_registry_and_config(runner, model_dir):
    saved = json.loads((model_dir[0] / "config.json").read_text())
    assert family_for(saved).name == "gemma3_text"
    typed = runner.config
    assert typed.sliding_window == WINDOW and typed.query_pre_attn_scalar == 24
    assert (typed.rope_theta, typed.local_rope_theta) == (1e6, 1e4)
    if typed.bidirectional:
        assert typed.local_window == (WINDOW // 2, WINDOW // 2)
    else:
        assert typed.local_window == (WINDOW - 1, 0)


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    check_every_weight_loaded(runner, model_dir[0])


def test_hidden_states_and_pooling_match_transformers(runner, model_dir, token_ids):
    expected = reference_hidden(model_dir[1], token_ids)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < FP32_TOL
    np.testing.assert_allclose(sie_pooled(runner, token_ids), reference_pooled(expected, "mean"),
                               atol=FP32_TOL, rtol=0)


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], pooling="mean", dtype="bfloat16")
    expected = reference_pooled(reference_hidden(model_dir[1], token_ids), "mean")
    assert cosine(sie_pooled(runner, token_ids), expected).min() > 0.999


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def test_unsupported_configs_are_refused_at_load():
    base = dict(model_type="gemma3_text", vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=8)
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        Gemma3TextConfig.from_hf({**base, "attn_logit_softcapping": 50.0})
    with pytest.raises(ValueError, match="rope_type"):
        Gemma3TextConfig.from_hf({**base, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    with pytest.raises(ValueError, match="layer_types"):
        Gemma3TextConfig.from_hf({**base, "layer_types": ["sliding_attention", "full_attention"]})


def _embeddinggemma_layout(root, hidden: int) -> None:
    """EmbeddingGemma's sentence-transformers files: mean pooling, Dense hidden -> 4 hidden -> hidden
    (no bias, identity), Normalize, and its query / document prompts."""
    from safetensors.torch import save_file

    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (root / "1_Pooling").mkdir(exist_ok=True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True, "include_prompt": True}))
    generator = torch.Generator().manual_seed(5)
    for idx, (n_in, n_out) in enumerate(((hidden, 4 * hidden), (4 * hidden, hidden)), start=2):
        folder = root / f"{idx}_Dense"
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(
            {"in_features": n_in, "out_features": n_out, "bias": False,
             "activation_function": "torch.nn.modules.linear.Identity"}))
        weight = torch.randn(n_out, n_in, generator=generator) / n_in ** 0.5
        save_file({"linear.weight": weight}, str(folder / "model.safetensors"))
        modules.append({"idx": idx, "name": str(idx), "path": folder.name,
                        "type": "sentence_transformers.models.Dense"})
    (root / "4_Normalize").mkdir(exist_ok=True)
    modules.append({"idx": 4, "name": "4", "path": "4_Normalize", "type": "sentence_transformers.models.Normalize"})
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    (root / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": QUERY_PROMPT, "document": DOCUMENT_PROMPT}, "default_prompt_name": None}))


def test_engine_equals_sentence_transformers_embeddinggemma_recipe(tmp_path):
    """google/embeddinggemma-300m as sentence-transformers runs it against SIE's card recipe on
    the same tiny bidirectional checkpoint: equal within 1e-4, queries and documents."""
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(1)
    model = tiny_gemma3(bidirectional=True)
    root = save_tiny(model, tmp_path / "embeddinggemma")
    _embeddinggemma_layout(root, model.config.hidden_size)
    st = SentenceTransformer(str(root), device="cpu")
    card = tiny_card(root, pooling="mean", id="tiny/embeddinggemma", normalize=True, family="gemma3_text",
                     query_template=QUERY_PROMPT + "{text}", document_template=DOCUMENT_PROMPT + "{text}")
    with Engine(Catalog([card]), device="cpu") as engine:
        for is_query, expected in ((True, st.encode(TEXTS, prompt_name="query")),
                                   (False, st.encode(TEXTS, prompt_name="document"))):
            got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS, is_query=is_query).items])
            assert got.shape == expected.shape == (len(TEXTS), model.config.hidden_size)
            np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)
