"""SIE's packed Jina XLM-RoBERTa (rotary positions) against transformers' JinaEmbeddingsV3Model on the
same weights, in the three layouts SIE reads: transformers' save_pretrained (Jina's flash names:
emb_ln, mixer.Wqkv, mlp.fc1/fc2, norm1/norm2), Jina's own checkpoint (`roberta.` prefix, config.json
`model_type: xlm-roberta` + `position_embedding_type: rotary` + `rotary_emb_base`, as jina-colbert-v2
ships it) and transformers' in-memory names (q_proj / k_proj / v_proj ...). PEFT adapters trained on
transformers' port apply as peft's merged model computes them.

Tolerances: float32 hidden states and pooled outputs within 1e-4 absolute; bfloat16 (SIE) against
float32 (transformers) within 6e-2 absolute on hidden states and a cosine of at least 0.999 pooled;
LoRA embeddings within 2e-5 (the merged weights round once where SIE adds the delta separately).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from arch_fixtures import (
    FP32_TOL,
    TEXTS,
    check_batch_invariance,
    check_every_weight_loaded,
    cosine,
    make_norms_count,
    max_abs_diff,
    no_segment_ids,
    reference_hidden,
    reference_pooled,
    runner_for,
    save_tiny,
    sie_hidden,
    sie_pooled,
)
from engine_fixtures import Recorder, make_engine
from jina_checkpoints import THETA, jina_layout, tiny_config
from lora_models import peft_reference
from sie_engine import ModelCard, WeightsSource
from sie_engine.models import family_for
from sie_engine.models.jina_xlm_roberta.model import JinaXLMRobertaConfig


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import JinaEmbeddingsV3Model

    torch.manual_seed(0)
    model = make_norms_count(JinaEmbeddingsV3Model(tiny_config(), add_pooling_layer=False).eval(), biases=True)
    return no_segment_ids(save_tiny(model, tmp_path_factory.mktemp("jina"))), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0])


@pytest.fixture(scope="module")
def token_ids(runner):
    return runner.tokenizer.encode(TEXTS).ids


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    assert runner.family.name == "jina_xlm_roberta"
    check_every_weight_loaded(runner, model_dir[0])
    saved = load_file(str(model_dir[0] / "model.safetensors"))
    assert "encoder.layers.0.mixer.Wqkv.weight" in saved  # the flash layout, as transformers writes it


def test_hidden_states_and_pooling_match_transformers(runner, model_dir, token_ids):
    expected = reference_hidden(model_dir[1], token_ids, pad_id=1)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < FP32_TOL
    for pooling in ("mean", "cls"):
        np.testing.assert_allclose(sie_pooled(runner_for(model_dir[0], pooling=pooling), token_ids),
                                   reference_pooled(expected, pooling), atol=FP32_TOL, rtol=0)


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], dtype="bfloat16")
    expected = reference_hidden(model_dir[1], token_ids, pad_id=1)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < 6e-2
    assert cosine(sie_pooled(runner, token_ids), reference_pooled(expected, "mean")).min() > 0.999


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def test_jinas_own_layout_is_the_same_model(model_dir, token_ids, tmp_path):
    root = jina_layout(model_dir[0], tmp_path / "jina")
    config = json.loads((root / "config.json").read_text())
    assert family_for(config).name == "jina_xlm_roberta"  # not the plain XLM-R of the bert family
    assert family_for({**config, "position_embedding_type": "absolute"}).name == "bert"
    runner = runner_for(root)
    expected = reference_hidden(model_dir[1], token_ids, pad_id=1)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < FP32_TOL


def test_transformers_in_memory_names_load_too(model_dir, token_ids, tmp_path):
    root = tmp_path / "in-memory"
    root.mkdir()
    for f in model_dir[0].iterdir():
        if f.is_file() and f.name != "model.safetensors":
            (root / f.name).write_bytes(f.read_bytes())
    state = {k: v.contiguous() for k, v in model_dir[1].state_dict().items()}
    assert "layers.0.self_attn.q_proj.weight" in state
    save_file(state, str(root / "model.safetensors"))
    expected = reference_hidden(model_dir[1], token_ids, pad_id=1)
    assert max_abs_diff(sie_hidden(runner_for(root), token_ids), expected) < FP32_TOL


def test_config_reads_both_layouts_and_refuses_what_it_does_not_run():
    port = tiny_config().to_dict()
    assert JinaXLMRobertaConfig.from_hf(port).rope_theta == THETA
    del port["rope_parameters"]
    assert JinaXLMRobertaConfig.from_hf(port).rope_theta == 20000.0  # JinaEmbeddingsV3Config.default_theta
    jina = {"model_type": "xlm-roberta", "position_embedding_type": "rotary", "rotary_emb_base": 20000,
            "vocab_size": 10, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
            "intermediate_size": 64}
    assert JinaXLMRobertaConfig.from_hf(jina).rope_theta == 20000.0
    with pytest.raises(ValueError, match="rotary base"):
        JinaXLMRobertaConfig.from_hf({k: v for k, v in jina.items() if k != "rotary_emb_base"})
    with pytest.raises(ValueError, match="lora_rank"):  # task adapters (test_jina_task_adapters.py) need their rank
        JinaXLMRobertaConfig.from_hf({**jina, "lora_adaptations": ["retrieval.query", "retrieval.passage"]})
    with pytest.raises(ValueError, match="rotary_emb_interleaved"):
        JinaXLMRobertaConfig.from_hf({**jina, "rotary_emb_interleaved": True})
    with pytest.raises(ValueError, match="position_embedding_type"):
        JinaXLMRobertaConfig.from_hf({**jina, "position_embedding_type": "absolute"})


def test_peft_adapters_on_the_port_apply_as_peft_merges_them(model_dir, tmp_path):
    """An adapter peft trained on transformers' JinaEmbeddingsV3Model (q/k/v become shards of the fused
    Wqkv; o_proj, fc1 and fc2 are SIE's out_proj, fc1, fc2) gives peft's merged model; without a
    lora_id the same engine serves the base model."""
    from peft import LoraConfig, get_peft_model
    from transformers import JinaEmbeddingsV3Model

    base = model_dir[0]
    torch.manual_seed(4)
    peft_model = get_peft_model(JinaEmbeddingsV3Model.from_pretrained(str(base)).eval(), LoraConfig(
        r=4, lora_alpha=8, init_lora_weights=False,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"]))
    with torch.no_grad():  # deltas as large as a trained adapter's
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(4.0)
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    merged = peft_reference(base, tmp_path / "adapter", TEXTS)
    assert np.abs(merged - peft_reference(base, None, TEXTS)).max() > 1e-2  # the adapter really changes them
    card = ModelCard(id="tiny/jina", weights=WeightsSource(path=str(base)), max_seq_len=120,
                     adapters={"all": WeightsSource(path=str(tmp_path / "adapter"))})
    with make_engine([card], Recorder()) as engine:
        for name, path in (("all", tmp_path / "adapter"), (None, None)):
            got = engine.encode_sync("tiny/jina", TEXTS, **({"lora_id": name} if name else {}))
            np.testing.assert_allclose(np.stack([it.dense for it in got.items]), peft_reference(base, path, TEXTS),
                                       atol=2e-5, err_msg=str(name))
