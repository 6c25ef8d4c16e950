"""SigLIP 2 NaFlex (google/siglip2-*-naflex): SigLIP 2 that sees each image at its own aspect ratio.

Its processor resizes an image so that its grid of `patch_size` patches, h x w, keeps the
picture's aspect ratio within `max_num_patches`, and hands the patches over flattened
(`[h * w, C * p * p]`). The vision tower embeds them with a linear layer, adds the learned
square grid of positions (`sqrt(num_patches)` a side) resized to h x w (bilinear, antialiased,
in float32 as transformers does), then runs SigLIP's encoder, post-norm and attention-pooling
head over the image's h * w positions. transformers pads every image of a batch to
`max_num_patches` and masks the padding; SIE packs each image's own positions, as it packs
texts, so a wide banner and a small square each cost what they hold.

The text tower is SigLIP's (siglip.py): Gemma's tokenizer, texts padded to 64 tokens, the last
position's state through the head. Checkpoints keep `Siglip2Model`'s tensor names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...batch import Grids
from ...images import ImagePreprocessor, prepare_images
from ..base import Family
from ..clip.card import image_text_card
from ..clip.model import ImageTextConfig, complete_towers
from .model import SiglipInputs, SiglipModel, shared_width


def siglip2_config(config: Mapping[str, Any]) -> ImageTextConfig:
    """SigLIP 2's config.json. Its vision tower names `num_patches` (a square grid of learned
    positions) where fixed-resolution towers name `image_size`: the grid's side in pixels stands in."""
    text, vision, _ = complete_towers(config, "siglip2")
    side = math.isqrt(int(vision["num_patches"]))
    if side * side != vision["num_patches"]:
        raise ValueError(f"vision_config num_patches={vision['num_patches']} is not a square grid of positions")
    vision = {**vision, "image_size": side * vision["patch_size"]}
    return ImageTextConfig.parse(text, vision, shared_width(text, vision),
                                 vision_use_head=bool(vision.get("vision_use_head", True)))


class NaflexEmbeddings(nn.Module):
    """Flattened patches through a linear layer, plus the position grid resized to each image's grid."""

    def __init__(self, config: ImageTextConfig):
        super().__init__()
        hidden = config.vision.hidden_size
        self.patch_embedding = nn.Linear(config.num_channels * config.patch_size ** 2, hidden)
        self.side = math.isqrt(config.num_patches)
        self.position_embedding = nn.Embedding(config.num_patches, hidden)

    def positions(self, height: int, width: int) -> torch.Tensor:
        """The learned grid resized to `height x width` patches: `[height * width, H]` float32."""
        grid = self.position_embedding.weight.float().reshape(self.side, self.side, -1).permute(2, 0, 1)[None]
        resized = F.interpolate(grid, size=(height, width), mode="bilinear", align_corners=False, antialias=True)
        return resized.reshape(grid.shape[1], height * width).T

    def forward(self, patches: torch.Tensor, grids: Sequence[tuple[int, int]]) -> torch.Tensor:
        """`[T, C * p * p]` patches of the images (grid after grid) -> `[T, H]`."""
        x = self.patch_embedding(patches)
        return x + torch.cat([self.positions(h, w) for h, w in grids]).to(x.dtype)


class Siglip2Model(SiglipModel):
    """Packed SigLIP 2 NaFlex: SigLIP's towers with NaFlex's patch embeddings; an image batch
    carries each image's patch grid (`ImageBatch.grids`)."""

    patch_grids = True  # images come as their own patch grids (runner.py packs them so)

    def __init__(self, config: ImageTextConfig, backend: AttentionBackend):
        super().__init__(config, backend)
        self.vision_model.embeddings = NaflexEmbeddings(config)

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        if grids is None:
            raise ValueError("a NaFlex image batch carries each image's patch grid (patch_grids)")
        vision = self.vision_model
        return vision.post_layernorm(vision.encoder(vision.embeddings(pixel_values, grids), attn))


class NaflexImages(ImagePreprocessor):
    """SigLIP 2 NaFlex's image role: an image is its own grid of patches, `[h, w, C * p * p]` (the
    grid's shape travels with the pixels), h * w positions of at most the processor's
    `max_num_patches` (the count admission assumes before it sees the image)."""

    def __init__(self, processor: Any, image_size: int, image_tokens: int):
        super().__init__(processor, image_size, int(processor.max_num_patches))

    def encode_images(self, values: Sequence[Any], fields: Sequence[str], limits) -> list[np.ndarray]:
        def own_grid(processed) -> np.ndarray:
            height, width = (int(n) for n in processed["spatial_shapes"][0])
            return processed["pixel_values"][0, :height * width].reshape(height, width, -1)

        return prepare_images(self.processor, values, fields, limits, own_grid)

    def positions(self, pixels: np.ndarray) -> int:
        return int(pixels.shape[0] * pixels.shape[1])


class Siglip2Inputs(SiglipInputs):
    """SigLIP 2 NaFlex's input preparation: SigLIP's texts, NaFlex's images (`NaflexImages`)."""

    read_config = staticmethod(siglip2_config)
    image_role = NaflexImages


FAMILY = Family("siglip2", siglip2_config, Siglip2Model, "last", tokenizer=Siglip2Inputs, local_card=image_text_card)
