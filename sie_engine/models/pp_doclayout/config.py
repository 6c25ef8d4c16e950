"""PP-DocLayoutV3's typed config, read once from a `PPDocLayoutV3ForObjectDetection` config.json
(`backbone_config`: an HGNetV2). Keys the file leaves out take transformers' PPDocLayoutV3Config and
HGNetV2Config defaults (`save_pretrained` writes only what differs from them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HGNetV2Config:
    stem_channels: tuple[int, int, int]
    stem_strides: tuple[int, ...]
    stage_in_channels: tuple[int, ...]
    stage_mid_channels: tuple[int, ...]
    stage_out_channels: tuple[int, ...]
    stage_num_blocks: tuple[int, ...]
    stage_downsample: tuple[bool, ...]
    stage_downsample_strides: tuple[int, ...]
    stage_light_block: tuple[bool, ...]
    stage_kernel_size: tuple[int, ...]
    stage_layers: tuple[int, ...]  # `stage_numb_of_layers`: convolutions per block
    hidden_act: str = "relu"
    learnable_affine: bool = False  # `use_learnable_affine_block`


@dataclass(frozen=True)
class PPDocLayoutConfig:
    backbone: HGNetV2Config
    id2label: tuple[str, ...]  # class names by id: the model's fixed labels
    image_size: tuple[int, int]  # (height, width) the image processor resizes to
    d_model: int = 256
    encoder_hidden_dim: int = 256
    encoder_layers: int = 1
    encoder_ffn_dim: int = 1024
    encoder_heads: int = 8
    encode_proj_layers: tuple[int, ...] = (2,)  # the feature levels the AIFI transformer layer runs on
    feat_strides: tuple[int, ...] = (8, 16, 32)
    encoder_activation: str = "gelu"
    activation: str = "silu"  # the hybrid encoder's convolutions
    hidden_expansion: float = 1.0
    mask_feature_channels: tuple[int, int] = (64, 64)
    x4_feat_dim: int = 128
    num_prototypes: int = 32
    num_queries: int = 300
    decoder_in_channels: tuple[int, ...] = (256, 256, 256)
    decoder_ffn_dim: int = 1024
    num_feature_levels: int = 3
    decoder_points: int = 4
    decoder_layers: int = 6
    decoder_heads: int = 8
    decoder_activation: str = "relu"
    global_pointer_head_size: int = 64
    positional_encoding_temperature: int = 10000
    layer_norm_eps: float = 1e-5
    batch_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True  # the decoder's class and box heads are the encoder's (one module each)

    @property
    def max_seq_len(self) -> None:
        return None  # no text: an image is its fixed side

    @property
    def hidden_size(self) -> int:
        return self.d_model


# options whose other values transformers' forward takes but no published checkpoint uses
_FIXED = {"normalize_before": False, "mask_enhanced": True, "learn_initial_query": False, "eval_size": None,
          "anchor_image_size": None}


def pp_doclayout_config(config: Mapping[str, Any], image_size: tuple[int, int] = (800, 800)) -> PPDocLayoutConfig:
    """config.json, completed by transformers' config classes, -> the typed config. `image_size`: the
    image processor's (height, width) (transformers' PPDocLayoutV3ImageProcessor default: 800 x 800)."""
    from transformers import CONFIG_MAPPING

    full = CONFIG_MAPPING["pp_doclayout_v3"].from_dict(dict(config)).to_dict()
    for key, value in _FIXED.items():
        if full.get(key) != value and not (value is None and not full.get(key)):
            raise ValueError(f"pp-doclayout config.json {key}: {full.get(key)!r} is not supported (only {value!r}, "
                             "as PaddlePaddle/PP-DocLayoutV3)")
    b = full["backbone_config"]
    if b.get("model_type") != "hgnet_v2":
        raise ValueError(f"pp-doclayout backbone_config.model_type {b.get('model_type')!r} is not supported "
                         "(only 'hgnet_v2')")
    if list(b.get("out_features") or []) != [f"stage{i}" for i in range(1, len(b["stage_in_channels"]) + 1)]:
        raise ValueError(f"pp-doclayout backbone_config.out_features {b.get('out_features')!r}: every stage is read "
                         "(the first as the mask branch's x4 feature, the others as the encoder's levels)")
    backbone = HGNetV2Config(
        tuple(b["stem_channels"]), tuple(b["stem_strides"]), tuple(b["stage_in_channels"]),
        tuple(b["stage_mid_channels"]), tuple(b["stage_out_channels"]), tuple(b["stage_num_blocks"]),
        tuple(bool(x) for x in b["stage_downsample"]), tuple(b["stage_downsample_strides"]),
        tuple(bool(x) for x in b["stage_light_block"]), tuple(b["stage_kernel_size"]),
        tuple(b["stage_numb_of_layers"]), b["hidden_act"], bool(b["use_learnable_affine_block"]))
    labels = {int(k): v for k, v in full["id2label"].items()}
    return PPDocLayoutConfig(
        backbone=backbone, id2label=tuple(labels[i] for i in range(len(labels))), image_size=image_size,
        d_model=full["d_model"], encoder_hidden_dim=full["encoder_hidden_dim"],
        encoder_layers=full["encoder_layers"], encoder_ffn_dim=full["encoder_ffn_dim"],
        encoder_heads=full["encoder_attention_heads"], encode_proj_layers=tuple(full["encode_proj_layers"]),
        feat_strides=tuple(full["feat_strides"]), encoder_activation=full["encoder_activation_function"],
        activation=full["activation_function"], hidden_expansion=float(full["hidden_expansion"]),
        mask_feature_channels=tuple(full["mask_feature_channels"]), x4_feat_dim=full["x4_feat_dim"],
        num_prototypes=full["num_prototypes"], num_queries=full["num_queries"],
        decoder_in_channels=tuple(full["decoder_in_channels"]), decoder_ffn_dim=full["decoder_ffn_dim"],
        num_feature_levels=full["num_feature_levels"], decoder_points=full["decoder_n_points"],
        decoder_layers=full["decoder_layers"], decoder_heads=full["decoder_attention_heads"],
        decoder_activation=full["decoder_activation_function"],
        global_pointer_head_size=full["global_pointer_head_size"],
        positional_encoding_temperature=full["positional_encoding_temperature"],
        layer_norm_eps=full["layer_norm_eps"], batch_norm_eps=full["batch_norm_eps"],
        tie_word_embeddings=bool(full.get("tie_word_embeddings", True)))
