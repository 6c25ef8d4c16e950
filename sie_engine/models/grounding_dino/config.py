"""Grounding DINO's typed config, read once from a `GroundingDinoForObjectDetection` config.json
(`backbone_config`: a Swin; `text_config`: a BERT). Keys the file leaves out take transformers'
GroundingDinoConfig defaults (IDEA-Research/grounding-dino-tiny's values)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..bert.model import BertConfig
from ..donut.swin import SwinConfig

# transformers' SwinBackbone always partitions into full windows (`always_partition=True`): the
# shared Swin layers shrink a window only for a map no larger than it at construction, so they are
# built for a map larger than any image the processor makes (its longest edge is 1,333 pixels)
UNBOUNDED_SIDE = 1 << 16


@dataclass(frozen=True)
class GroundingDinoConfig:
    swin: SwinConfig
    out_stages: tuple[int, ...]  # the Swin stages (1-based, as `out_indices`) the feature levels start from
    text: BertConfig
    d_model: int = 256
    num_queries: int = 900  # decoder queries: the most boxes one image can answer
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    encoder_heads: int = 8
    decoder_heads: int = 8
    encoder_points: int = 4  # sampled keys per head and level of the deformable attention
    decoder_points: int = 4
    feature_levels: int = 4  # the Swin's out stages plus strided convolutions on the last
    max_text_len: int = 256  # the prompt's tokens the model reads; logits are padded to it
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    position_temperature: int = 20  # the image's sine position embedding
    embedding_init_target: bool = True  # decoder queries start from a learned table, not the proposals

    @property
    def max_seq_len(self) -> int:
        return min(self.max_text_len, self.text.max_seq_len)

    @property
    def hidden_size(self) -> int:
        return self.d_model


def _swin(backbone: Mapping[str, Any]) -> tuple[SwinConfig, tuple[int, ...]]:
    if backbone.get("model_type", "swin") != "swin":
        raise ValueError(f"grounding-dino backbone_config.model_type {backbone.get('model_type')!r} is not supported "
                         "(only 'swin', as every published Grounding DINO)")
    if backbone.get("use_absolute_embeddings"):
        raise ValueError("grounding-dino backbone_config.use_absolute_embeddings: true is not supported")
    depths = tuple(int(d) for d in backbone.get("depths", (2, 2, 6, 2)))
    out = backbone.get("out_indices") or [int(name.removeprefix("stage")) for name in backbone.get("out_features", ())]
    out_stages = tuple(int(i) for i in out) or (2, 3, 4)
    if any(not 1 <= i <= len(depths) for i in out_stages):
        raise ValueError(f"grounding-dino backbone_config.out_indices {list(out_stages)}: stages are 1..{len(depths)}")
    patch = backbone.get("patch_size", 4)
    swin = SwinConfig(image_size=(UNBOUNDED_SIDE, UNBOUNDED_SIDE), patch_size=int(patch),
                      num_channels=int(backbone.get("num_channels", 3)), embed_dim=int(backbone.get("embed_dim", 96)),
                      depths=depths, num_heads=tuple(backbone.get("num_heads", (3, 6, 12, 24))),
                      window_size=int(backbone.get("window_size", 7)), mlp_ratio=float(backbone.get("mlp_ratio", 4.0)),
                      qkv_bias=bool(backbone.get("qkv_bias", True)), hidden_act=str(backbone.get("hidden_act", "gelu")),
                      layer_norm_eps=float(backbone.get("layer_norm_eps", 1e-5)))
    return swin, out_stages


def _refuse(config: Mapping[str, Any]) -> None:
    """The published checkpoints' choices, the only ones this forward implements: each other value
    is named."""
    fixed = {"two_stage": True, "decoder_bbox_embed_share": True, "two_stage_bbox_embed_share": False,
             "position_embedding_type": "sine", "query_dim": 4}
    for key, value in fixed.items():
        if config.get(key, value) != value:
            raise ValueError(f"grounding-dino {key}={config[key]!r} is not supported (only {value!r}, as "
                             "IDEA-Research/grounding-dino-tiny and -base)")


def grounding_dino_config(config: Mapping[str, Any]) -> GroundingDinoConfig:
    _refuse(config)
    text = dict(config.get("text_config") or {})
    if text.get("model_type", "bert") != "bert":
        raise ValueError(f"grounding-dino text_config.model_type {text.get('model_type')!r} is not supported "
                         "(only 'bert': the prompt's phrases are cut at BERT's [CLS], [SEP], '.' and '?' ids)")
    # transformers' BertConfig defaults (bert-base-uncased) for what the nested config leaves out
    defaults = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072)
    swin, out_stages = _swin(config.get("backbone_config") or {})
    levels = int(config.get("num_feature_levels", 4))
    if levels < len(out_stages):
        raise ValueError(f"grounding-dino num_feature_levels {levels} < the backbone's {len(out_stages)} out stages")
    return GroundingDinoConfig(
        swin=swin, out_stages=out_stages, text=BertConfig.from_hf({**defaults, **text, "model_type": "bert"}),
        d_model=int(config.get("d_model", 256)), num_queries=int(config.get("num_queries", 900)),
        encoder_layers=int(config.get("encoder_layers", 6)), decoder_layers=int(config.get("decoder_layers", 6)),
        encoder_ffn_dim=int(config.get("encoder_ffn_dim", 2048)),
        decoder_ffn_dim=int(config.get("decoder_ffn_dim", 2048)),
        encoder_heads=int(config.get("encoder_attention_heads", 8)),
        decoder_heads=int(config.get("decoder_attention_heads", 8)),
        encoder_points=int(config.get("encoder_n_points", 4)), decoder_points=int(config.get("decoder_n_points", 4)),
        feature_levels=levels, max_text_len=int(config.get("max_text_len", 256)),
        activation=str(config.get("activation_function", "relu")),
        layer_norm_eps=float(config.get("layer_norm_eps", 1e-5)),
        position_temperature=int(config.get("positional_embedding_temperature", 20)),
        embedding_init_target=bool(config.get("embedding_init_target", True)),
    )
