"""Tiny random models for the reliability, fuzz and soak tests: a dense encoder,
a cross-encoder and a GLiNER extractor, all on the real MiniLM tokenizer."""

from __future__ import annotations

from pathlib import Path

from tiny_models import make_tiny_bert, save_tiny, tiny_bert_config


def tiny_cross_encoder(dest: Path, seed: int = 7) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(seed)
    return save_tiny(BertForSequenceClassification(tiny_bert_config(num_labels=1)).eval(), dest)


def tiny_gliner(dest: Path, backbone: Path, seed: int = 11) -> Path:
    from test_gliner_extract import build_reference

    build_reference(dest, backbone, seed=seed, hidden_size=32, max_width=6)
    return dest


def tiny_model_set(tmp: Path) -> dict[str, Path]:
    """name -> directory: `enc` (dense), `ce` (cross-encoder), `gl` (GLiNER)."""
    enc = make_tiny_bert(tmp / "enc", seed=1)
    return {"enc": enc, "ce": tiny_cross_encoder(tmp / "ce"), "gl": tiny_gliner(tmp / "gl", enc)}
