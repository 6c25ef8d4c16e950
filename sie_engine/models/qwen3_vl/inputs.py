"""Qwen3-VL-Embedding's input preparation, as its published script (QwenLM/Qwen3-VL-Embedding,
`src/models/qwen3_vl_embedding.py`, `Qwen3VLEmbedder`) builds an item: a chat of a system turn (the
instruction, "Represent the user's input." by default) and a user turn (an image item's image, a
text item's text), rendered by the Qwen3-VL chat template with the generation prompt.

- A text item: the card's templates write that chat around it (`query_template` with the
  request's instruction, `document_template` with the default one); tokenised whole.
- An image item (with or without a text beside it): the same templates around the image's one
  `<|image_pad|>` (between `<|vision_start|>` and `<|vision_end|>`) and then its text, the
  placeholder standing for its N image features (N = h * w / merge**2 of its patch grid)
  (`image_prompts`).
- An image's pixels: the script resizes it (qwen_vl_utils' smart resize, factor patch * merge = 32)
  so both sides are multiples of 32 pixels and its area lies within 4 and 1800 such 32 x 32 tokens
  (its MIN_PIXELS, MAX_PIXELS), then hands it to the processor with `do_resize=False`; here the
  processor's own smart resize runs at those bounds, whatever its preprocessor_config.json says
  (the checkpoints' larger defaults are not what the scripts use).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import InvalidRequest
from ...tokenizer import ImageTextInputs
from ..colqwen2.inputs import IMAGE_TOKEN, Qwen2VLImages
from .model import Qwen3VLConfig
from .video import prepare_video

DEFAULT_INSTRUCTION = "Represent the user's input."  # Qwen3VLEmbedder's default_instruction
# Qwen3VLEmbedder's MIN_PIXELS and MAX_PIXELS, in tokens of (patch * merge)**2 pixels
MIN_IMAGE_TOKENS = 4
MAX_IMAGE_TOKENS = 1800


def chat_prompt(system: str, user: str) -> str:
    """The Qwen3-VL chat template's text of a system turn and a user turn, with the generation prompt."""
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


IMAGE_CONTENT = f"<|vision_start|>{IMAGE_TOKEN}<|vision_end|>"  # the chat template's rendering of an image


class Qwen3VLInputs(ImageTextInputs):
    """Qwen3-VL-Embedding's input preparation (see the module docstring)."""

    class_tokens = 0
    images: Qwen2VLImages

    def __init__(self, layout, max_length: int, trust_remote_code: bool = False):
        super().__init__(layout, max_length, trust_remote_code)
        ids = self.plain_ids(chat_prompt(DEFAULT_INSTRUCTION, IMAGE_CONTENT))
        places = np.flatnonzero(ids == self.token_id(IMAGE_TOKEN))
        if len(places) != 1:  # a tokenizer without the placeholder as one special token
            raise ValueError(f"{self.layout_root}: the tokenizer splits {IMAGE_TOKEN}; a Qwen3-VL tokenizer keeps it "
                             "whole")
        # the default chat around an image: admission's bound on an image item's positions counts it
        self.images.prompt_tokens = len(ids) - 1
        self.images.image_tokens += self.images.prompt_tokens

    @staticmethod
    def read_config(config: Any) -> Any:
        return Qwen3VLConfig.from_hf(config)

    def image_preprocessor(self, processor: Any, config: Any) -> Qwen2VLImages:
        area = (int(processor.patch_size) * int(processor.merge_size)) ** 2
        processor.size = {"shortest_edge": MIN_IMAGE_TOKENS * area, "longest_edge": MAX_IMAGE_TOKENS * area}
        return Qwen2VLImages(processor)

    image_prompted = True
    image_content = IMAGE_CONTENT  # an image as the chat template writes it into a prompt
    reads_video = True  # video.py: a video's temporal patches, each with its timestamp

    def encode_video(self, value: Any, field: str, limits: Any) -> tuple[tuple[np.ndarray, ...], str]:
        return prepare_video(value, self.images.processor, limits, field, IMAGE_CONTENT)

    def image_prompts(self, texts: Sequence[str | None], wrap: Callable[[list[str]], list[str]],
                      pixels: Sequence[np.ndarray | tuple[np.ndarray, ...]],
                      fields: Sequence[str],
                      contents: Sequence[str | None] | None = None) -> tuple[list[np.ndarray], list[int]]:
        """The chat of each image item (the user turn: its image, then its text, as the script orders
        them) through the card's template, and its positions: each image's features stand for its
        placeholder (an item of several images, a reranker's image query beside an image document,
        has `wrap` write the others' placeholders, in the order of its pixels; a video item's content,
        in `contents`, holds one placeholder per temporal patch). Refused (400) when the images and
        the text pass the window: nothing is cut."""
        whole = self._untruncated()
        image_id = self.token_id(IMAGE_TOKEN)
        own = contents or [None] * len(texts)
        prompts = [np.asarray(whole.encode(prompt, add_special_tokens=False).ids, dtype=np.int32)
                   for prompt in wrap([(content or IMAGE_CONTENT) + (text or "") for content, text in zip(own, texts)])]
        merge = self.images.merge
        counts = []
        for values, ids in zip(pixels, prompts):
            images = values if isinstance(values, tuple) else (values,)
            if int((ids == image_id).sum()) != len(images):
                raise ValueError(f"an image item's prompt holds {int((ids == image_id).sum())} image placeholders "
                                 f"for its {len(images)} images")
            features = sum(int(grid.shape[0] * grid.shape[1]) // merge ** 2 for grid in images)  # [h, w, ...]
            counts.append(features + len(ids) - len(images))
        for count, field, text in zip(counts, fields, texts):
            if count > self.max_length:
                what = "video" if field.endswith(".video") else "image"
                raise InvalidRequest(f"{field}: the {what} and its prompt{' and text' if text else ''} take {count} "
                                     f"positions; this model reads at most {self.max_length} (shorten the text or "
                                     f"send a {'shorter or ' if what == 'video' else ''}smaller {what})", field=field)
        return prompts, counts

    def load_text(self, layout, max_length: int, trust_remote_code: bool) -> None:
        self.layout_root = layout.root
        super().load_text(layout, max_length, trust_remote_code)
