"""PaddleOCR-VL served through extract, as GLM-OCR is (models/glm_ocr/serving.py, whose input
preparation and `generate` head this reuses): the checkpoint's tokenizer and chat template for the
prompt, PaddleOCRVLImageProcessor for pages, and the card of a card-less PaddleOCR-VL directory.

A PaddleOCR-VL card's `options.generate.task_prompt` is `{task}`: a request names its task (tasks.py:
`ocr`, the default, `table`, `formula` or `chart`), and the prompt is the checkpoint's chat template
over one user turn, the page then the task's text, with the generation prompt, as the model card's
`processor.apply_chat_template(messages, add_generation_prompt=True)` writes it. Its one
`<|IMAGE_PLACEHOLDER|>` stands for the page's N image features (N = h * w / merge**2 of its patch
grid), repeated N times as PaddleOCRVLProcessor does. The answer is the generated text decoded
without its special tokens (`processor.batch_decode(..., skip_special_tokens=True)`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..colqwen2.inputs import Qwen2VLImages
from ..glm_ocr.serving import GlmOcrGeneration, GlmOcrInputs, generation_heads, task_prompted_card
from . import tasks
from .model import PaddleOcrVlConfig

if TYPE_CHECKING:
    from ...card import ModelCard
    from ...generation.head import GenerationHead
    from ...heads.context import HeadContext

IMAGE_TOKEN = "<|IMAGE_PLACEHOLDER|>"  # PaddleOCRVLProcessor's (the tokenizer's image_token)
DEFAULT_MAX_PIXELS = 1536 * 1536  # PaddleOCRVLImageProcessor's default size.longest_edge


class PaddleOcrImages(Qwen2VLImages):
    """A page is its own grid of patches (`[h, w, C * p * p]`, raster order: one frame), resized by
    PaddleOCR-VL's own smart resize (a side under the factor is scaled up to it first)."""

    def resized(self, width: int, height: int) -> tuple[int, int]:
        from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import smart_resize

        processor = self.processor
        h, w = smart_resize(height, width, factor=self.factor, min_pixels=int(processor.size["shortest_edge"]),
                            max_pixels=int(processor.size["longest_edge"]))
        return w, h


class PaddleOcrInputs(GlmOcrInputs):
    """GLM-OCR's input preparation with PaddleOCR-VL's placeholder, images and default task."""

    name = "PaddleOCR-VL"
    image_token = IMAGE_TOKEN
    image_role = PaddleOcrImages
    read_config = staticmethod(PaddleOcrVlConfig.from_hf)
    default_prompt = tasks.PROMPTS[tasks.DEFAULT_TASK]


class PaddleOcrGeneration(GlmOcrGeneration):
    name = "PaddleOCR-VL"


def build_generation_head(ctx: HeadContext) -> dict[str, GenerationHead]:
    return generation_heads(ctx, PaddleOcrGeneration)


def local_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A card-less directory: every task (the request's `task`, ocr by default)."""
    return task_prompted_card(name, root, PaddleOcrVlConfig.from_hf(config).max_seq_len, "paddleocr_vl",
                              DEFAULT_MAX_PIXELS, f"PaddleOCR-VL from {root} (task: ocr, table, formula or chart)")
