"""SIE's packed Llama (the qwen family's blocks with Llama's biases and Llama 3.1's llama3-scaled
rotary) against transformers' LlamaModel on the same tiny random weights, causal and bidirectional,
and the llama-embed-nemotron-8b card against the model's published encode recipe (mteb's
`LlamaEmbedNemotron`, contributed by its authors: "Instruct: ...\\nQuery: " on queries, nothing on
documents, a bidirectional Llama, the mean over every token, normalised).

Tolerances: float32 hidden states and pooled outputs within 1e-4 absolute.
"""

from __future__ import annotations

import dataclasses
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
    make_norms_count,
    max_abs_diff,
    reference_hidden,
    runner_for,
    save_tiny,
    sie_hidden,
)
from sie_engine import Catalog, Engine, WeightsSource
from sie_engine.layers.rotary import Llama3Scaling
from sie_engine.models import family_for
from sie_engine.models.qwen.model import QwenConfig

# a window of 16 original positions over head_dim 16: the scaling divides the low frequencies, keeps the
# high ones and blends the middle band, so every branch of llama3's rule is exercised
LLAMA3 = {"rope_type": "llama3", "rope_theta": 10_000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}


def tiny_llama(**overrides):
    from transformers import LlamaConfig, LlamaModel

    config = dict(vocab_size=MINILM_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512, rms_norm_eps=1e-5,
                  rope_parameters=LLAMA3, attention_bias=True)
    config.update(overrides)
    return make_norms_count(LlamaModel(LlamaConfig(**config)).eval(), biases=True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = tiny_llama()
    return save_tiny(model, tmp_path_factory.mktemp("llama")), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0], pooling="mean")


@pytest.fixture(scope="module")
def token_ids(runner):
    return runner.tokenizer.encode(TEXTS).ids


def test_registry_and_config(model_dir):
    config = model_dir[1].config.to_dict()
    assert family_for(config).name == "llama"
    assert family_for({"architectures": ["LlamaBidirectionalModel"]}).name == "llama"
    typed = QwenConfig.from_hf(config)
    assert (typed.qkv_bias, typed.o_bias, typed.causal) == (True, True, True)
    assert typed.rope_scaling == Llama3Scaling(8.0, 1.0, 4.0, 16)
    assert QwenConfig.from_hf({**config, "model_type": "llama_bidirec"}).causal is False
    with pytest.raises(ValueError, match="mlp_bias"):
        QwenConfig.from_hf({**config, "mlp_bias": True})
    with pytest.raises(ValueError, match="rope_type"):
        QwenConfig.from_hf({**config, "rope_parameters": {"rope_type": "yarn", "factor": 4.0}})


def test_llama3_frequencies_equal_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters=LLAMA3)
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    from sie_engine.layers.rotary import RotaryEmbedding

    got = RotaryEmbedding(16, 10_000.0, Llama3Scaling(8.0, 1.0, 4.0, 16)).inv_freq(torch.device("cpu"))
    torch.testing.assert_close(got, expected.float(), atol=0, rtol=1e-6)
    assert not torch.allclose(got, RotaryEmbedding(16, 10_000.0).inv_freq(torch.device("cpu")))


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    check_every_weight_loaded(runner, model_dir[0])


def test_hidden_states_match_transformers(runner, model_dir, token_ids):
    assert max(len(ids) for ids in token_ids) > 16  # past the original window: the scaled frequencies matter
    assert max_abs_diff(sie_hidden(runner, token_ids), reference_hidden(model_dir[1], token_ids)) < FP32_TOL


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def _bidirectional(model, ids) -> torch.Tensor:
    """transformers' LlamaModel attending both ways over one unpadded sequence -> `[L, H]`."""
    with torch.no_grad():
        everything = torch.zeros(1, 1, len(ids), len(ids))  # an additive 4D mask that hides nothing
        return model(input_ids=torch.tensor([list(ids)]), attention_mask=everything).last_hidden_state[0]


def test_llama_embed_nemotron_card_equals_its_published_recipe(tmp_path):
    """The card on a tiny bidirectional Llama saved as NVIDIA's `llama_bidirec`: queries with the
    request's instruction, documents bare; each text alone as the recipe encodes it (unpadded)."""
    from transformers import AutoTokenizer

    torch.manual_seed(4)
    model = tiny_llama()
    root = save_tiny(model, tmp_path / "nemotron")
    config = json.loads((root / "config.json").read_text())
    config.update(model_type="llama_bidirec", architectures=["LlamaBidirectionalModel"])
    (root / "config.json").write_text(json.dumps(config))
    card = dataclasses.replace(Catalog.builtin().get("nvidia/llama-embed-nemotron-8b"),
                               weights=WeightsSource(path=str(root)), dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(str(root))
    instruction = "Given a claim, find documents that refute the claim"

    def recipe(prefix: str) -> np.ndarray:  # mteb's _extract_embeddings: prefix + text, average_pooling, normalize
        pooled = [_bidirectional(model, tokenizer(prefix + text)["input_ids"]).mean(0) for text in TEXTS]
        return torch.nn.functional.normalize(torch.stack(pooled), dim=-1).numpy()

    with Engine(Catalog([card]), device="cpu") as engine:
        queries = engine.encode_sync(card.id, TEXTS, is_query=True, instruction=instruction).items
        documents = engine.encode_sync(card.id, TEXTS).items
        assert engine.model_info(card.id).family == "llama"
    np.testing.assert_allclose(np.stack([q.dense for q in queries]), recipe(f"Instruct: {instruction}\nQuery: "),
                               atol=FP32_TOL, rtol=0)
    np.testing.assert_allclose(np.stack([d.dense for d in documents]), recipe(""), atol=FP32_TOL, rtol=0)
