"""Every architecture string registered for the ModernBERT, Qwen2/Qwen3, Mistral, Gemma 3, DistilBERT and NomicBERT
families (and Jina's rotary XLM-RoBERTa) resolves to its family and loads the backbone out of that class's checkpoint
(whose prefix and extra head tensors differ: `model.`, `nomic_bert.`, lm/classifier heads),
giving transformers' base-model hidden states within 1e-4 (float32)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arch_fixtures import FP32_TOL, max_abs_diff, reference_hidden, runner_for, save_tiny, sie_hidden
from sie_engine.models import ARCHITECTURES, family_for

VOCAB = 1000  # token ids are fed directly: the tokenizer's vocabulary does not matter here
LENGTHS = (3, 17, 40)


def _modernbert(cls_name):
    import transformers

    config = transformers.ModernBertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
        local_attention=8, pad_token_id=0, bos_token_id=1, cls_token_id=1, eos_token_id=2, sep_token_id=2, num_labels=3)
    return getattr(transformers, cls_name)(config)


def _qwen(cls_name):
    import transformers

    generation = "Qwen3" if cls_name.startswith("Qwen3") else "Qwen2"
    extra = dict(head_dim=16) if generation == "Qwen3" else {}
    config = getattr(transformers, f"{generation}Config")(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=48, pad_token_id=0, num_labels=3, **extra)
    return getattr(transformers, cls_name)(config)


def _mistral(cls_name):
    import transformers

    config = transformers.MistralConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=48, pad_token_id=0, sliding_window=64)
    return getattr(transformers, cls_name)(config)


def _gemma3(cls_name):
    import transformers

    config = transformers.Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=48, pad_token_id=0, sliding_window=16, use_bidirectional_attention=True,
        layer_types=["sliding_attention", "full_attention"])
    return getattr(transformers, cls_name)(config)


def _distilbert(cls_name):
    import transformers

    config = transformers.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=48)
    return getattr(transformers, cls_name)(config)


def _nomic(cls_name):
    import transformers

    config = transformers.NomicBertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=48, num_labels=3)
    return getattr(transformers, cls_name)(config)


def _jina(cls_name):
    import transformers

    config = transformers.JinaEmbeddingsV3Config(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                                 num_attention_heads=4, intermediate_size=48)
    return getattr(transformers, cls_name)(config)


CASES = {
    "ModernBertModel": _modernbert, "ModernBertForMaskedLM": _modernbert,
    "ModernBertForSequenceClassification": _modernbert, "ModernBertForTokenClassification": _modernbert,
    "Qwen2Model": _qwen, "Qwen2ForCausalLM": _qwen, "Qwen2ForSequenceClassification": _qwen,
    "Qwen3Model": _qwen, "Qwen3ForCausalLM": _qwen, "Qwen3ForSequenceClassification": _qwen,
    "MistralModel": _mistral, "MistralForCausalLM": _mistral, "Gemma3TextModel": _gemma3,
    "DistilBertModel": _distilbert, "DistilBertForMaskedLM": _distilbert,
    "DistilBertForSequenceClassification": _distilbert,
    "NomicBertModel": _nomic, "NomicBertForMaskedLM": _nomic, "NomicBertForSequenceClassification": _nomic,
    "JinaEmbeddingsV3Model": _jina, "JinaEmbeddingsV3ForMaskedLM": _jina,
}
# Registered strings without a transformers class (Nomic's remote-code pretraining wrapper).
WITHOUT_TRANSFORMERS_CLASS = {"NomicBertForPreTraining"}


def test_every_registered_string_of_these_families_has_a_case():
    ours = {a for a, f in ARCHITECTURES.items() if f in ("modernbert", "qwen2", "qwen3", "mistral", "gemma3_text",
                                                           "nomic_bert", "distilbert", "jina_xlm_roberta")}
    assert ours == set(CASES) | WITHOUT_TRANSFORMERS_CLASS


@pytest.mark.parametrize("architecture", sorted(CASES))
def test_architecture_loads_its_backbone(architecture, tmp_path):
    torch.manual_seed(0)
    model = CASES[architecture](architecture).eval()
    root = save_tiny(model, tmp_path)
    config = model.config.to_dict()
    assert config["architectures"] == [architecture]
    family = family_for(config)
    assert family.name == ARCHITECTURES[architecture]
    runner = runner_for(root, pooling="last" if family.name.startswith("qwen") else "mean")
    generator = torch.Generator().manual_seed(1)
    ids = [torch.randint(3, VOCAB, (n,), generator=generator).numpy().astype(np.int32) for n in LENGTHS]
    expected = reference_hidden(model.base_model, ids)
    assert max_abs_diff(sie_hidden(runner, ids), expected) < FP32_TOL
