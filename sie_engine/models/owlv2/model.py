"""OWLv2 (`Owlv2ForObjectDetection`: google/owlv2-base-patch16, -ensemble, -finetuned): CLIP's two
towers (clip/model.py's pre-norm layers, read leaf to root there) with OWL-ViT's detection heads
on the vision tower's patch tokens.

Text: `forward(input_ids [T], positions [T], attn) -> hidden [T, H_text]` (causal attention, the
final layer norm); `query_embeddings(hidden, input_ids, cu_seqlens, seq_index) -> [B, D]` pools
each label at its highest token id (transformers' argmax: CLIP's end-of-text token), projects
and L2-normalises it, as `Owlv2Model` returns `text_embeds`.
Images: `forward_images(pixel_values [B, 3, S, S], attn) -> hidden [B * (P + 1), H_vision]`
(the class token and P patches per image, packed, before the post-norm); `patch_features(hidden,
cu_seqlens) -> [B, P, H]`: post-norm, each patch times its image's class token, layer norm
(`image_embedder`). On those: `boxes` (`[B, P, 4]` centre x, y, width, height in [0, 1] of the
padded square: the box head plus each patch's grid bias, through a sigmoid), `objectness`
(`[B, P]` logits) and `class_logits(features [P, H], queries [Q, D]) -> [P, Q]` for one image's
labels (the requests of a batch ask for labels of their own).

Module names follow transformers' so checkpoint names map one to one (the QKV projections are
stacked by the weight spec).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...batch import Grids
from ...images import ImagePreprocessor, prepare_images
from ...layers.weights import WeightSpec
from ...tokenizer import ImageTextInputs
from ...validation import Limits
from ..base import Backbone, Family
from ..clip.model import Encoder, ImageTextConfig, PatchEmbeddings, TextTower
from .card import detector_card
from .config import owlv2_config


# ---- the detection heads (OWL-ViT's, over the patch tokens) -------------------------------
class BoxPredictionHead(nn.Module):
    """Two GELU (exact, whatever the towers' activation) layers and an output layer of `out_dim`."""

    def __init__(self, width: int, out_dim: int):
        super().__init__()
        self.dense0 = nn.Linear(width, width)
        self.dense1 = nn.Linear(width, width)
        self.dense2 = nn.Linear(width, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense2(F.gelu(self.dense1(F.gelu(self.dense0(x)))))


class ClassPredictionHead(nn.Module):
    """Patch embeddings projected to the text width and compared (cosine) with the queries, then a
    learned per-patch shift and scale (`elu(scale) + 1`)."""

    def __init__(self, vision_width: int, text_width: int):
        super().__init__()
        self.dense0 = nn.Linear(vision_width, text_width)
        self.logit_shift = nn.Linear(vision_width, 1)
        self.logit_scale = nn.Linear(vision_width, 1)

    def forward(self, features: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """features `[P, H_vision]`, queries `[Q, D]` -> logits `[P, Q]`."""
        patches = self.dense0(features)
        # transformers' epsilon, not F.normalize's clamp: the logits equal its to the last bits
        patches = patches / (torch.linalg.norm(patches, dim=-1, keepdim=True) + 1e-6)
        queries = queries / (torch.linalg.norm(queries, dim=-1, keepdim=True) + 1e-6)
        logits = patches @ queries.T
        return (logits + self.logit_shift(features)) * (F.elu(self.logit_scale(features)) + 1)


def box_bias(side: int, device: torch.device) -> torch.Tensor:
    """`[side * side, 4]`: the logit of each patch's corner (its centre prior, row-major as the
    patches are) and of one patch's size (OWL-ViT's `compute_box_bias`, square grids)."""
    steps = torch.arange(1, side + 1, dtype=torch.float32, device=device) / side
    yy, xx = torch.meshgrid(steps, steps, indexing="ij")  # row-major: x varies fastest
    centres = torch.stack((xx, yy), dim=-1).view(-1, 2).clip(0.0, 1.0)
    centre_bias = torch.log(centres + 1e-4) - torch.log1p(-centres + 1e-4)
    size = torch.full_like(centre_bias, 1.0 / side)
    size_bias = torch.log(size + 1e-4) - torch.log1p(-size + 1e-4)
    return torch.cat([centre_bias, size_bias], dim=-1)


# ---- the model ----------------------------------------------------------------------------
class Owlv2Detector(Backbone):
    """Packed OWLv2; see the module docstring for its passes. Not a `TwoTowerBackbone`: its towers
    meet in the detection heads, not in one embedding space (no dense output)."""

    supports_images = True

    weight_spec = WeightSpec(
        anchor="owlv2.text_model.embeddings.token_embedding.weight",
        stacked=(("self_attn.q_proj", "self_attn.qkv", 0), ("self_attn.k_proj", "self_attn.qkv", 1),
                 ("self_attn.v_proj", "self_attn.qkv", 2)),
        # the contrastive temperature and the image tower's pooled projection serve CLIP-style
        # image-text similarity, which detection never computes
        ignore=("owlv2.logit_scale", "owlv2.visual_projection", "owlv2.text_model.embeddings.position_ids",
                "owlv2.vision_model.embeddings.position_ids"),
    )

    def __init__(self, config: ImageTextConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        vision_width = config.vision.hidden_size
        self.owlv2 = nn.Module()
        self.owlv2.text_model = TextTower(config, backend, causal=True)
        self.owlv2.vision_model = nn.Module()
        vision = self.owlv2.vision_model
        vision.embeddings = PatchEmbeddings(config, class_token=True, conv_bias=False)
        vision.pre_layernorm = nn.LayerNorm(vision_width, eps=config.vision.layer_norm_eps)
        vision.encoder = Encoder(config.vision, backend, causal=False)
        vision.post_layernorm = nn.LayerNorm(vision_width, eps=config.vision.layer_norm_eps)
        self.owlv2.text_projection = nn.Linear(config.text.hidden_size, config.projection_dim, bias=False)
        self.class_head = ClassPredictionHead(vision_width, config.text.hidden_size)
        self.box_head = BoxPredictionHead(vision_width, 4)
        self.objectness_head = BoxPredictionHead(vision_width, 1)
        self.layer_norm = nn.LayerNorm(vision_width, eps=config.vision.layer_norm_eps)
        self.grid_side = config.image_size // config.patch_size

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.owlv2.text_model(input_ids, positions, attn)

    def query_embeddings(self, hidden: torch.Tensor, input_ids: torch.Tensor, cu_seqlens: torch.Tensor,
                         seq_index: torch.Tensor) -> torch.Tensor:
        """Each label's state at its first highest id, projected and L2-normalised: `[B, D]`."""
        highest = torch.zeros(cu_seqlens.shape[0] - 1, dtype=input_ids.dtype, device=input_ids.device)
        highest = highest.scatter_reduce_(0, seq_index, input_ids, "amax", include_self=False)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        hit = torch.where(input_ids == highest[seq_index], rows, input_ids.shape[0])
        first = torch.full_like(highest, input_ids.shape[0]).scatter_reduce_(0, seq_index, hit, "amin")
        embeds = self.owlv2.text_projection(hidden.index_select(0, first))
        return embeds / torch.linalg.norm(embeds, ord=2, dim=-1, keepdim=True)

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        vision = self.owlv2.vision_model
        return vision.encoder(vision.pre_layernorm(vision.embeddings(pixel_values)), attn)

    def patch_features(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        """`[B * (P + 1), H]` -> `[B, P, H]`: each patch times its image's class token, normed."""
        images = cu_seqlens.shape[0] - 1
        states = self.owlv2.vision_model.post_layernorm(hidden).view(images, -1, hidden.shape[-1])  # [B, P + 1, H]
        return self.layer_norm(states[:, 1:] * states[:, :1])

    def boxes(self, features: torch.Tensor) -> torch.Tensor:
        """`[B, P, H]` -> `[B, P, 4]` (cx, cy, w, h) relative to the padded square."""
        # rebuilt per batch (a few thousand values), not a buffer: the backbone is built on the meta
        # device, where a computed buffer would come out uninitialised
        bias = box_bias(self.grid_side, features.device).to(features.dtype)
        return torch.sigmoid(self.box_head(features) + bias)

    def objectness(self, features: torch.Tensor) -> torch.Tensor:
        """`[B, P, H]` -> `[B, P]` logits (how likely a patch's box holds any object)."""
        return self.objectness_head(features)[..., 0]

    def class_logits(self, features: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """One image's `[P, H]` features and its labels' `[Q, D]` query embeddings -> `[P, Q]`."""
        return self.class_head(features, queries)


class DetectorImages(ImagePreprocessor):
    """The image role of a detector: each image's pixels and its (height, width) as decoded, the
    pixels its boxes are answered in."""

    def encode_sized(self, values: Sequence[Any], fields: Sequence[str],
                     limits: Limits) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        sizes: list[tuple[int, int]] = []
        return prepare_images(self.processor, values, fields, limits, sizes=sizes), sizes


class Owlv2Inputs(ImageTextInputs):
    """OWLv2's input preparation: its CLIP tokenizer for the labels, its image processor (pad to a
    square, resize to `image_size`, normalise) for the images; an image is P + 1 positions."""

    class_tokens = 1
    image_role = DetectorImages
    images: DetectorImages
    read_config = staticmethod(owlv2_config)


FAMILY = Family("owlv2", owlv2_config, Owlv2Detector, "last", tokenizer=Owlv2Inputs, local_card=detector_card)
