"""DistilBERT (msmarco-distilbert-*, multi-qa-distilbert-*, opensearch's and naver's distilled
SPLADE encoders) over packed input.

DistilBERT is BERT's encoder under other names, with no segment embeddings (and no pooler):
word + learned position embeddings from position 0, LayerNorm, then post-norm layers of
attention and a GELU feed-forward, every LayerNorm at eps 1e-12. So the forward pass is
models/bert/model.py's, and this file is the config mapping and the rename table from DistilBERT's
checkpoint names (`transformer.layer.N.attention.q_lin`, `sa_layer_norm`, `ffn.lin1`, ...)
to BERT's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ...layers.weights import WeightSpec
from ..base import Family, MaskedLMLayout
from .model import BertConfig, BertModel


def distilbert_config(config: Mapping[str, Any]) -> BertConfig:
    if config.get("model_type", "distilbert") != "distilbert":
        raise ValueError(f"model_type={config.get('model_type')!r} is not a DistilBERT checkpoint")
    return BertConfig(
        vocab_size=config["vocab_size"],
        hidden_size=config.get("dim", 768),
        num_hidden_layers=config.get("n_layers", 6),
        num_attention_heads=config.get("n_heads", 12),
        intermediate_size=config.get("hidden_dim", 3072),
        hidden_act=config.get("activation", "gelu"),
        max_position_embeddings=config.get("max_position_embeddings", 512),
        type_vocab_size=0,  # no segment embeddings
        layer_norm_eps=1e-12,  # fixed in DistilBERT's code, not in its config
    )


class DistilBertModel(BertModel):
    """Packed DistilBERT: BERT's forward over DistilBERT's checkpoint names."""

    weight_spec = WeightSpec(
        anchor="embeddings.word_embeddings.weight",
        renames=(
            ("transformer.layer.", "encoder.layer."),
            ("attention.out_lin.", "attention.output.dense."),
            ("sa_layer_norm.", "attention.output.LayerNorm."),
            ("ffn.lin1.", "intermediate.dense."),
            ("ffn.lin2.", "output.dense."),
            ("output_layer_norm.", "output.LayerNorm."),
        ),
        stacked=(
            ("attention.q_lin", "attention.qkv", 0),
            ("attention.k_lin", "attention.qkv", 1),
            ("attention.v_lin", "attention.qkv", 2),
        ),
        ignore=("embeddings.position_ids",),
    )

    def sequence_classifier(self, ctx: Any) -> nn.Module:
        """DistilBertForSequenceClassification's head: `pre_classifier` + ReLU on the first token, then
        `classifier` (no pooler: BERT's layout, which the class would inherit, is not DistilBERT's)."""
        from ...heads.classifier import DenseAct, SequenceClassifier
        from ...heads.common import linear, tensor

        device, dtype, tensors = ctx.device, ctx.dtype, ctx.checkpoint
        pre = DenseAct(linear(tensor(tensors, "pre_classifier.weight"), tensor(tensors, "pre_classifier.bias"),
                              device, dtype), torch.relu)
        classifier = linear(tensor(tensors, "classifier.weight"), tensor(tensors, "classifier.bias"), device, dtype)
        return SequenceClassifier("cls", pre, classifier)

    @classmethod
    def masked_lm_layout(cls, config: Mapping[str, Any]) -> MaskedLMLayout:
        """DistilBertForMaskedLM's `vocab_transform` / `vocab_layer_norm` / `vocab_projector` (its
        LayerNorm eps fixed in DistilBERT's code)."""
        return MaskedLMLayout(dense="vocab_transform", norm="vocab_layer_norm",
                              activation=config.get("activation", "gelu"), eps=1e-12,
                              decoder="vocab_projector.weight", bias=("vocab_projector.bias",))


FAMILY = Family("distilbert", distilbert_config, DistilBertModel, "mean")
