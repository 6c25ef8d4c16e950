"""CLIP (openai/clip-*, LAION's CLIP-ViT-* in transformers layout): a text tower and a vision
tower over packed input, each ending in its projection to the shared embedding space.

Read leaf to root: the pre-norm transformer layer both towers share (also SigLIP's, see
siglip.py), the text embeddings, the vision (patch) embeddings, the towers, the model.
Module names follow Hugging Face's `CLIPModel` so checkpoint names map one to one, except
the fused QKV projection, which the weight spec stacks from `q_proj/k_proj/v_proj`.

Text: `forward(input_ids [T], positions [T], attn) -> hidden [T, H_text]` (after the final
layer norm, causal attention); `text_features(hidden, batch) -> [B, D]` pools each sequence at
its end-of-text token and projects. Images: `forward_images(pixel_values [B, 3, S, S], attn)
-> hidden [B * (P + 1), H_vision]` (P patches and the class token per image, packed);
`image_features(hidden, batch) -> [B, D]` takes the class token, post-norm, projection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata, default_scale
from ...batch import Grids
from ...layers.blocks import activation, residual_linear_
from ...layers.weights import WeightSpec
from ...tokenizer import ImageTextInputs
from ..base import Family, TwoTowerBackbone
from .card import image_text_card


@dataclass(frozen=True)
class TowerConfig:
    """One tower's transformer (text or vision)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str
    layer_norm_eps: float

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> TowerConfig:
        return TowerConfig(
            hidden_size=config["hidden_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            hidden_act=config["hidden_act"],
            layer_norm_eps=config["layer_norm_eps"],
        )


@dataclass(frozen=True)
class ImageTextConfig:
    """config.json of a CLIP or SigLIP checkpoint (`text_config` and `vision_config` inside).

    vocab_size, max_position_embeddings: the text tower's vocabulary and positions.
    eos_token_id: CLIP pools at this token; 2, the value before transformers PR #24773, means
        "the highest id in the sequence" (the original checkpoints' end-of-text token).
    image_size, patch_size, num_channels: the vision tower's input.
    projection_dim: the shared embedding width (SigLIP: the text head's output, equal to the
        vision width).
    """

    text: TowerConfig
    vision: TowerConfig
    vocab_size: int
    max_position_embeddings: int
    eos_token_id: int | None
    image_size: int
    patch_size: int
    num_channels: int
    projection_dim: int
    vision_use_head: bool = True  # SigLIP only: the attention-pooling head

    # the vision tower's inputs are images, not tokens: SIE's batcher counts patches
    towers = ("text", "image")

    @property
    def hidden_size(self) -> int:
        return self.projection_dim

    @property
    def max_seq_len(self) -> int:
        return self.max_position_embeddings

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> ImageTextConfig:
        """CLIP's config.json; the shared width is its `projection_dim`."""
        text, vision, top = complete_towers(config, "clip")
        return ImageTextConfig.parse(text, vision, top["projection_dim"])

    @staticmethod
    def parse(text: Mapping[str, Any], vision: Mapping[str, Any], projection_dim: int,
              vision_use_head: bool = True) -> ImageTextConfig:
        return ImageTextConfig(
            text=TowerConfig.from_hf(text),
            vision=TowerConfig.from_hf(vision),
            vocab_size=text["vocab_size"],
            max_position_embeddings=text["max_position_embeddings"],
            eos_token_id=text.get("eos_token_id"),
            image_size=vision["image_size"],
            patch_size=vision["patch_size"],
            num_channels=vision["num_channels"],
            projection_dim=int(projection_dim),
            vision_use_head=vision_use_head,
        )


def complete_towers(config: Mapping[str, Any], model_type: str) -> tuple[dict, dict, dict]:
    """(text_config, vision_config, the whole) with every key transformers' config class fills
    in: `save_pretrained` writes only the keys that differ from its defaults, so a published
    config.json (siglip-so400m's, for one) leaves out the activation, norms' eps and more."""
    from transformers import CONFIG_MAPPING

    if not config.get("text_config") or not config.get("vision_config"):
        raise ValueError("config.json has no text_config and vision_config: not a two-tower image-text model")
    full = CONFIG_MAPPING[model_type].from_dict(dict(config))
    return full.text_config.to_dict(), full.vision_config.to_dict(), full.to_dict()


# ---- the pre-norm layer both towers (and SigLIP's) share ----------------------------------
class MLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, act: str):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.fc2 = nn.Linear(intermediate_size, hidden_size)
        self.act = activation(act, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SelfAttention(nn.Module):
    """Fused QKV, variable-length attention (causal in CLIP's text tower), output projection."""

    def __init__(self, hidden_size: int, num_heads: int, backend: AttentionBackend, causal: bool):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        self.backend = backend
        self.causal = causal
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        """`[T, H]` (normed) -> attention output before the residual, `[T, H]`."""
        T, H = x.shape
        q, k, v = self.qkv(x).view(T, 3, self.num_heads, self.head_dim).unbind(1)  # [T, heads, head_dim] each
        return self.backend(q, k, v, attn, scale=self.scale, causal=self.causal).reshape(T, H)


class EncoderLayer(nn.Module):
    """x + attn(ln1(x)), then x + mlp(ln2(x)) (pre-norm, as CLIP and SigLIP)."""

    def __init__(self, config: TowerConfig, backend: AttentionBackend, causal: bool):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.self_attn = SelfAttention(config.hidden_size, config.num_attention_heads, backend, causal)
        self.layer_norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = MLP(config.hidden_size, config.intermediate_size, config.hidden_act)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        x = residual_linear_(x, self.self_attn.out_proj, self.self_attn(self.layer_norm1(x), attn))
        h = self.mlp.act(self.mlp.fc1(self.layer_norm2(x)))
        return residual_linear_(x, self.mlp.fc2, h)


class Encoder(nn.Module):
    def __init__(self, config: TowerConfig, backend: AttentionBackend, causal: bool):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config, backend, causal) for _ in range(config.num_hidden_layers))

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, attn)
        return x


# ---- embeddings ---------------------------------------------------------------------------
class TextEmbeddings(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int, max_positions: int):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, hidden_size)
        self.position_embedding = nn.Embedding(max_positions, hidden_size)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """`[T]` ids and positions -> `[T, H]`."""
        return self.token_embedding(input_ids) + self.position_embedding(positions)


class PatchInput(Protocol):
    """What PatchEmbeddings reads of a config: CLIP / SigLIP's ImageTextConfig, ColPali's PaliGemmaConfig."""

    @property
    def vision(self) -> TowerConfig: ...
    @property
    def num_channels(self) -> int: ...
    @property
    def patch_size(self) -> int: ...
    @property
    def num_patches(self) -> int: ...


class PatchEmbeddings(nn.Module):
    """Non-overlapping patches through one strided convolution, plus learned positions;
    CLIP prepends a class token (SigLIP has none, and a bias on its convolution)."""

    def __init__(self, config: PatchInput, class_token: bool, conv_bias: bool):
        super().__init__()
        hidden = config.vision.hidden_size
        self.patch_embedding = nn.Conv2d(config.num_channels, hidden, kernel_size=config.patch_size,
                                         stride=config.patch_size, bias=conv_bias)
        self.class_embedding = nn.Parameter(torch.empty(hidden)) if class_token else None
        self.num_positions = config.num_patches + (1 if class_token else 0)
        self.position_embedding = nn.Embedding(self.num_positions, hidden)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """`[B, C, S, S]` -> `[B * positions, H]`, image after image."""
        patches = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)  # [B, P, H]
        if self.class_embedding is not None:
            cls = self.class_embedding.to(patches.dtype).expand(patches.shape[0], 1, -1)
            patches = torch.cat([cls, patches], dim=1)  # [B, P + 1, H]
        x = patches + self.position_embedding.weight[None]
        return x.reshape(-1, x.shape[-1])


# ---- the model ----------------------------------------------------------------------------
class TextTower(nn.Module):
    def __init__(self, config: ImageTextConfig, backend: AttentionBackend, causal: bool):
        super().__init__()
        self.embeddings = TextEmbeddings(config.vocab_size, config.text.hidden_size, config.max_position_embeddings)
        self.encoder = Encoder(config.text, backend, causal)
        self.final_layer_norm = nn.LayerNorm(config.text.hidden_size, eps=config.text.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        return self.final_layer_norm(self.encoder(self.embeddings(input_ids, positions), attn))


def first_token_where(hit: torch.Tensor, cu_seqlens: torch.Tensor, seq_index: torch.Tensor) -> torch.Tensor:
    """`[B]` packed row of each sequence's first token with `hit` (`[T]` bool); its last token
    where none has (as argmax over an all-false row would give the first, CLIP's inputs always
    end in the token, so this never differs from Hugging Face's for its tokenizer's output)."""
    rows = torch.arange(hit.shape[0], device=hit.device)
    last = cu_seqlens[1:].long() - 1
    candidates = torch.where(hit, rows, last[seq_index])
    return last.clone().scatter_reduce_(0, seq_index, candidates, "amin")


class ClipModel(TwoTowerBackbone):
    """Packed CLIP; see the module docstring for the two forward passes."""

    weight_spec = WeightSpec(
        anchor="text_model.embeddings.token_embedding.weight",
        stacked=(("self_attn.q_proj", "self_attn.qkv", 0), ("self_attn.k_proj", "self_attn.qkv", 1),
                 ("self_attn.v_proj", "self_attn.qkv", 2)),
        ignore=("logit_scale", "text_model.embeddings.position_ids", "vision_model.embeddings.position_ids"),
    )

    def __init__(self, config: ImageTextConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.text_model = TextTower(config, backend, causal=True)
        self.vision_model = nn.Module()
        self.vision_model.embeddings = PatchEmbeddings(config, class_token=True, conv_bias=False)
        self.vision_model.pre_layrnorm = nn.LayerNorm(config.vision.hidden_size, eps=config.vision.layer_norm_eps)
        self.vision_model.encoder = Encoder(config.vision, backend, causal=False)
        self.vision_model.post_layernorm = nn.LayerNorm(config.vision.hidden_size, eps=config.vision.layer_norm_eps)
        self.text_projection = nn.Linear(config.text.hidden_size, config.projection_dim, bias=False)
        self.visual_projection = nn.Linear(config.vision.hidden_size, config.projection_dim, bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.text_model(input_ids, positions, attn)

    def text_features(self, hidden: torch.Tensor, input_ids: torch.Tensor, cu_seqlens: torch.Tensor,
                      seq_index: torch.Tensor) -> torch.Tensor:
        """Each sequence's end-of-text state, projected: `[B, D]`."""
        eos = self.config.eos_token_id
        if eos == 2:  # legacy configs: the end-of-text token is the highest id of the sequence
            highest = torch.zeros(cu_seqlens.shape[0] - 1, dtype=input_ids.dtype, device=input_ids.device)
            highest = highest.scatter_reduce_(0, seq_index, input_ids, "amax", include_self=False)
            hit = input_ids == highest[seq_index]
        else:
            hit = input_ids == eos
        return self.text_projection(hidden.index_select(0, first_token_where(hit, cu_seqlens, seq_index)))

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        vision = self.vision_model
        return vision.encoder(vision.pre_layrnorm(vision.embeddings(pixel_values)), attn)

    def image_features(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        """Each image's class token, post-norm and projection: `[B, D]`."""
        cls = hidden.index_select(0, cu_seqlens[:-1].long())
        return self.visual_projection(self.vision_model.post_layernorm(cls))


class ClipInputs(ImageTextInputs):
    """CLIP's input preparation: its tokenizer, its image processor; an image is P + 1 positions."""

    class_tokens = 1
    read_config = staticmethod(ImageTextConfig.from_hf)


FAMILY = Family("clip", ImageTextConfig.from_hf, ClipModel, "last", tokenizer=ClipInputs, local_card=image_text_card)
