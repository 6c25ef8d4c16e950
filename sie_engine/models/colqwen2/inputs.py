"""ColQwen2's input preparation, as ColQwen2Processor: the prompts around a page's image features,
the query prefix and augmentation, and Qwen2VLImageProcessor's smart resize of each page.

- A page: `visual_prompt_prefix` ("<|im_start|>user\\n<|vision_start|><|image_pad|><|vision_end|>Describe
  the image.<|im_end|><|endoftext|>") with its one `<|image_pad|>` standing for the page's N image
  features (N = h * w / merge**2 of its patch grid): the tokens before the placeholder, the N
  features, the tokens after it.
- A query: `query_prefix` ("Query: ") + text + 10 pad tokens (`<|endoftext|>`, query augmentation)
  + "\\n", tokenised as the processor does (the Qwen2 tokenizer adds no special tokens); a
  colpali-engine checkpoint's (colpali_engine.py) without the "\\n", as colpali-engine writes them.
- A page's pixels: the processor resizes it so both sides are multiples of patch_size * merge_size
  and its area lies within min/max pixels (`size.shortest_edge` / `size.longest_edge` are areas
  here), then hands its patches over flattened, window by window: `[h * w, C * T * p * p]`, kept
  as `[h, w, C * T * p * p]` so the grid travels with the pixels (runner.py packs such grids).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidRequest, PayloadTooLarge
from ...images import MAX_RESIZED_PIXELS, ImagePreprocessor, prepare_images
from ...tokenizer import ImageTextInputs, Tokenized
from .colpali_engine import query_newline
from .model import ColQwen2Config

QUERY_AUGMENTATION_TOKENS = 10  # ColQwen2Processor's suffix: the pad token ten times
VISUAL_PROMPT = ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image.<|im_end|>"
                 "<|endoftext|>")  # ColQwen2Processor's default visual_prompt_prefix
QUERY_PREFIX = "Query: "  # and its default query_prefix
IMAGE_TOKEN = "<|image_pad|>"
MAX_ASPECT_RATIO = 200  # smart_resize refuses a longer side over 200 times the shorter


def read_colqwen2_prompts(root: Path) -> dict[str, str]:
    """The processor's prompts (`processor_config.json`; ColQwen2Processor's defaults where absent)."""
    path = Path(root) / "processor_config.json"
    settings = json.loads(path.read_text()) if path.is_file() else {}
    return {"visual_prompt_prefix": settings.get("visual_prompt_prefix") or VISUAL_PROMPT,
            "query_prefix": settings.get("query_prefix") or QUERY_PREFIX}


def smart_resize(processor: Any, width: int, height: int) -> tuple[int, int]:
    """(width, height) the processor resizes a `width` x `height` page to (transformers'
    qwen2_vl `smart_resize` with the processor's factor and pixel bounds)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as reference

    factor = int(processor.patch_size) * int(processor.merge_size)
    h, w = reference(height, width, factor=factor, min_pixels=int(processor.size["shortest_edge"]),
                     max_pixels=int(processor.size["longest_edge"]))
    return w, h


def own_grid(processed: Any) -> np.ndarray:
    """The processor's patches of one page as `[h, w, C * T * p * p]` (its grid kept with its pixels)."""
    _, height, width = (int(n) for n in processed["image_grid_thw"][0])
    return processed["pixel_values"].reshape(height, width, -1)  # type: ignore[no-any-return]


class Qwen2VLImages(ImagePreprocessor):
    """The image role: a page is its own grid of patches, `[h, w, C * T * p * p]`; it costs its
    image features plus the prompt around them (`prompt_tokens`, set by ColQwen2Inputs), at most
    `image_tokens` (the processor's max pixels, within SIE's resize bound: admission's count);
    `image_size`: the side of a square of that many pixels."""

    def __init__(self, processor: Any):
        self.merge = int(processor.merge_size)
        self.factor = int(processor.patch_size) * self.merge
        most = min(int(processor.size["longest_edge"]), MAX_RESIZED_PIXELS)
        super().__init__(processor, math.isqrt(most), most // self.factor ** 2)
        self.prompt_tokens = 0

    def check_size(self, width: int, height: int, field: str) -> None:
        """A page smart_resize cannot take (400) or that it would make too large (413), refused
        from its header before a pixel is decoded."""
        if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
            raise InvalidRequest(f"{field} is {width} x {height} pixels: this model takes pages whose longer side is "
                                 f"at most {MAX_ASPECT_RATIO} times the shorter (crop or pad it)", field=field)
        new_w, new_h = self.resized(width, height)
        if new_w * new_h > MAX_RESIZED_PIXELS:
            raise PayloadTooLarge(f"{field} is {width} x {height} pixels: this model's preprocessing would resize it "
                                  f"to {new_w} x {new_h}; at most {MAX_RESIZED_PIXELS} pixels (downscale it)",
                                  field=field)

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) the processor resizes a page to (Qwen2-VL's smart resize)."""
        return smart_resize(self.processor, width, height)

    def encode_images(self, values: Sequence[Any], fields: Sequence[str], limits,
                      sizes: list[tuple[int, int]] | None = None) -> list[np.ndarray]:
        return prepare_images(self.processor, values, fields, limits, own_grid, sizes=sizes,
                              check_size=self.check_size)

    def encode_images_sized(self, values: Sequence[Any], fields: Sequence[str],
                            limits) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        sizes: list[tuple[int, int]] = []
        pixels = self.encode_images(values, fields, limits, sizes)
        return pixels, [(width, height) for height, width in sizes]

    def positions(self, pixels: np.ndarray) -> int:
        return int(pixels.shape[0] * pixels.shape[1]) // self.merge ** 2 + self.prompt_tokens


class ColQwen2Inputs(ImageTextInputs):
    """ColQwen2's input preparation (see the module docstring): a text item is a query, an image
    item a page (`image_prompt`: the prompt's ids before and after its image features)."""

    class_tokens = 0
    images: Qwen2VLImages

    def __init__(self, layout, max_length: int, trust_remote_code: bool = False):
        super().__init__(layout, max_length, trust_remote_code)
        prompts = read_colqwen2_prompts(self.layout_root)
        self.query_prefix = prompts["query_prefix"]
        newline = "\n" if query_newline(self.layout_config) else ""  # transformers' processor; colpali-engine's none
        self.query_suffix = self.hf.pad_token * QUERY_AUGMENTATION_TOKENS + newline
        ids = self.plain_ids(prompts["visual_prompt_prefix"])
        image_id = self.token_id(IMAGE_TOKEN)
        places = np.flatnonzero(ids == image_id)
        if len(places) != 1:
            raise ValueError(f"{self.layout_root}: visual_prompt_prefix has {len(places)} {IMAGE_TOKEN} "
                             "placeholders; ColQwen2 pages take exactly one")
        self.image_prompt = (ids[:places[0]], ids[places[0] + 1:])
        self.images.prompt_tokens = len(ids) - 1
        self.images.image_tokens += self.images.prompt_tokens

    @staticmethod
    def read_config(config: Any) -> Any:
        return ColQwen2Config.from_hf(config)

    def image_preprocessor(self, processor: Any, config: Any) -> Qwen2VLImages:
        return Qwen2VLImages(processor)  # each page's size is the processor's to decide

    def load_text(self, layout, max_length: int, trust_remote_code: bool) -> None:
        self.layout_root, self.layout_config = layout.root, layout.config
        super().load_text(layout, max_length, trust_remote_code)

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = True, with_offsets: bool = False) -> Tokenized:
        """Queries as ColQwen2Processor.process_queries writes them."""
        queries = [f"{self.query_prefix}{text}{self.query_suffix}" for text in texts]
        return super().encode(queries, add_special_tokens=add_special_tokens, with_offsets=with_offsets)
