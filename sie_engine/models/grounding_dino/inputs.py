"""Grounding DINO's input preparation: its BERT tokenizer for the prompt (the request's labels
merged, prompt.py) and its image processor for the images (resized to an 800-pixel shortest,
1,333-pixel longest edge keeping the aspect ratio, rescaled, normalised). Each image keeps its
own size: its pixels travel as `[H, W, 3]` (the runner's own-grid packing) and it counts as its
encoder positions (every feature level's cells)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...checkpoints import CheckpointLayout, describe
from ...errors import InvalidRequest, SIEError
from ...images import ImagePreprocessor, load_image_processor, prepare_images
from ...tokenizer import TextTokenizer
from ...validation import Limits
from .config import GroundingDinoConfig, grounding_dino_config
from .model import LARGEST_IMAGE, level_shapes


class GroundingDinoImages(ImagePreprocessor):
    """The image role: pixels `[H, W, 3]` float32 per image, at the processor's size for it."""

    def __init__(self, processor: Any, config: GroundingDinoConfig):
        largest = sum(h * w for h, w in level_shapes(config, *LARGEST_IMAGE))
        super().__init__(processor, max(LARGEST_IMAGE), largest)  # admission's count before an image is seen
        self.config = config

    def encode_images(self, values: Sequence[Any], fields: Sequence[str], limits: Limits) -> list[np.ndarray]:
        return self.encode_sized(values, fields, limits)[0]

    def encode_sized(self, values: Sequence[Any], fields: Sequence[str],
                     limits: Limits) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        """Images as sent -> (pixels `[H, W, 3]` each, each picture's (height, width) as decoded)."""
        def own_size(processed) -> np.ndarray:  # [3, H, W] -> [H, W, 3]
            return np.ascontiguousarray(processed["pixel_values"][0].transpose(1, 2, 0))

        sizes: list[tuple[int, int]] = []
        pixels: list[np.ndarray] = []
        for value, field in zip(values, fields):  # one at a time, as prepare_images: an error names its item
            try:
                pixels.extend(prepare_images(self.processor, [value], [field], limits, own_size, sizes=sizes))
            except SIEError:
                raise
            except ValueError as exc:  # the processor's resize: the short side of a sliver rounds to 0 pixels
                raise InvalidRequest(f"{field} cannot be resized for this model: its aspect ratio is too extreme "
                                     "(its short side would round to 0 pixels once the long side is cut to the "
                                     f"processor's longest edge; {type(exc).__name__}): crop it",
                                     field=field) from None
        return pixels, sizes

    def positions(self, pixels: np.ndarray) -> int:
        return sum(h * w for h, w in level_shapes(self.config, int(pixels.shape[0]), int(pixels.shape[1])))


class GroundingDinoInputs(TextTokenizer):
    """The prompt through the checkpoint's BERT tokenizer (TextTokenizer), images as `images`."""

    images: GroundingDinoImages

    def __init__(self, layout: CheckpointLayout | Any, max_length: int, trust_remote_code: bool = False):
        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        super().__init__(layout, max_length, trust_remote_code=trust_remote_code)
        self.images = GroundingDinoImages(load_image_processor(layout.root), grounding_dino_config(layout.config))

    def decode_labels(self, token_ids: Sequence[Sequence[int]]) -> list[str]:
        """Each box's prompt tokens -> its label text (`GroundingDinoProcessor.batch_decode`)."""
        return list(self.hf.batch_decode([list(ids) for ids in token_ids]))
