"""GLM-OCR served through extract: its input preparation (the checkpoint's tokenizer and chat
template for the prompt, Glm46VImageProcessor for pages), its `generate` head (generation/head.py)
and the card of a card-less GLM-OCR directory.

A GLM-OCR card's `options.generate.task_prompt` is `{task}`: a request names its task (tasks.py:
`text`, the default, `formula`, `table`, or `custom` with its own `prompt`), and the prompt is the
checkpoint's chat template over one user turn, the page then the task's text, with the generation
prompt (`<|assistant|>`), as the model card's `processor.apply_chat_template(messages,
add_generation_prompt=True)` writes it. Its one `<|image|>` stands for the page's N image features
(N = h * w / merge**2 of its patch grid): the head repeats it N times when the page's size is known,
as Glm46VProcessor does. The answer is the generated text decoded without its special tokens, as the
model card's `processor.decode(..., skip_special_tokens=True)` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...checkpoints import CheckpointLayout, describe
from ...generation.head import Answer, GenerationHead, generate_options
from ...generation.loop import GenerationRequest
from ...generation.settings import GenerationSettings
from ...images import load_image_processor, read_image_processor_config
from ...tokenizer import VocabularyLookup
from ..colqwen2.inputs import Qwen2VLImages
from ..florence2.reader import generation_config
from . import tasks
from .model import GlmOcrConfig, GlmOcrModel, rope_index

if TYPE_CHECKING:
    from ...card import ModelCard
    from ...generation.worker import Job
    from ...heads.context import HeadContext

IMAGE_TOKEN = "<|image|>"  # Glm46VProcessor's placeholder


class GlmOcrImages(Qwen2VLImages):
    """A page is its own grid of patches (`[h, w, C * T * p * p]`, Qwen2-VL's layout), resized by
    Glm46VImageProcessor's smart resize (two frames: `temporal_patch_size`)."""

    def resized(self, width: int, height: int) -> tuple[int, int]:
        from transformers.models.glm46v.image_processing_pil_glm46v import smart_resize

        processor = self.processor
        frames = int(processor.temporal_patch_size)
        h, w = smart_resize(num_frames=frames, height=height, width=width, temporal_factor=frames,
                            factor=self.factor, min_pixels=int(processor.size["shortest_edge"]),
                            max_pixels=int(processor.size["longest_edge"]))
        return w, h


class GlmOcrInputs(VocabularyLookup):
    """The checkpoint's tokenizer (transformers', for the chat template and for decoding answers) and,
    as `images`, its image processor; a page costs its image features plus the prompt around them.
    The class attributes name what differs in another model prompted so (models/paddleocr_vl)."""

    images: GlmOcrImages
    name = "GLM-OCR"
    image_token = IMAGE_TOKEN
    image_role: type[Qwen2VLImages] = GlmOcrImages
    read_config: Callable[[Mapping[str, Any]], Any] = staticmethod(GlmOcrConfig.from_hf)  # image_token_id
    default_prompt = tasks.PROMPTS[tasks.DEFAULT_TASK] or ""

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        from transformers import AutoTokenizer

        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        self.hf = AutoTokenizer.from_pretrained(str(layout.root), trust_remote_code=trust_remote_code)
        if not self.hf.chat_template:
            raise ValueError(f"{layout.root}: no chat template (chat_template.jinja): {self.name}'s prompt is its "
                             "chat template's")
        self._tok = self.hf.backend_tokenizer
        self.special_ids = frozenset(self.hf.all_special_ids)
        # the processor's placeholder: the tokenizer's `image_token` where it names one (Glm46VProcessor and
        # PaddleOCRVLProcessor read it so), else the family's
        self.image_token = getattr(self.hf, "image_token", None) or self.image_token
        self.image_token_id = self.token_id(self.image_token)
        if self.image_token_id != self.read_config(layout.config).image_token_id:
            raise ValueError(f"{layout.root}: the tokenizer's {self.image_token} is not config.json's image_token_id")
        self.images = self.image_role(load_image_processor(layout.root))  # type: ignore[assignment]
        # admission's count of a page beside its features: the default task's prompt
        self.images.prompt_tokens = len(self.prompt_ids(self.default_prompt)) - 1
        self.images.image_tokens += self.images.prompt_tokens

    def prompt_ids(self, prompt: str) -> list[int]:
        """The chat template's prompt of one page and the task's text, its image placeholder once."""
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = self.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = list(self.hf(text, add_special_tokens=False)["input_ids"])
        if ids.count(self.image_token_id) != 1:
            raise ValueError(f"the chat template wrote {ids.count(self.image_token_id)} {self.image_token} "
                             "placeholders for one page")
        return ids


def expand_image(prompt: Sequence[int], image_token_id: int, features: int) -> list[int]:
    """The prompt with its one image placeholder repeated once per image feature (Glm46VProcessor's)."""
    at = list(prompt).index(image_token_id)
    return [*prompt[:at], *[image_token_id] * features, *prompt[at + 1:]]


class GlmOcrGeneration(GenerationHead):
    takes_prompt = False  # the prompt is the task's (tasks.py), `custom`'s included
    name = "GLM-OCR"  # in a card's errors (models/paddleocr_vl's subclass names its own)

    def __init__(self, model: GlmOcrModel, tokenizer: Any, root: Path, options: Mapping[str, Any], card_id: str,
                 dtype: torch.dtype):
        super().__init__()
        self.hold(model)
        self.tokenizer = tokenizer  # transformers' (GlmOcrInputs.hf)
        task_prompt, self.max_new_tokens, overrides = generate_options(options, card_id)
        if task_prompt != "{task}":
            raise ValueError(f"card {card_id}: options.generate.task_prompt must be \"{{task}}\" for {self.name} "
                             f"(a request names its task), got {task_prompt!r}")
        self.generation = {**generation_config(root), **overrides}
        self.default = GenerationSettings.from_generation_config(self.generation, max_new_tokens=self.max_new_tokens)
        self.element_size = torch.empty((), dtype=dtype).element_size()
        if self.max_new_tokens >= model.decoder_positions:
            raise ValueError(f"card {card_id}: options.generate.max_new_tokens {self.max_new_tokens} leaves no room "
                             f"for a page in the decoder's {model.decoder_positions} positions")

    def settings(self, max_new_tokens: int) -> GenerationSettings:
        return self.default.with_overrides(max_new_tokens=max_new_tokens)

    def requests(self, jobs: Sequence[Job], device: torch.device, dtype: torch.dtype) -> list[GenerationRequest]:
        """The pages through the vision tower in one packed pass, each page's features in its prompt's
        embeddings at transformers' M-RoPE positions."""
        model: GlmOcrModel = self.model  # type: ignore[assignment]
        pixels = [job.pixels for job in jobs if job.pixels is not None]
        grids = tuple((int(p.shape[0]), int(p.shape[1])) for p in pixels)
        patches = torch.from_numpy(np.concatenate([p.reshape(-1, p.shape[-1]) for p in pixels]))
        features = model.encode_images(patches.to(device, dtype), grids)
        image_id = model.config.image_token_id
        requests = []
        for job, grid, page in zip(jobs, grids, features, strict=True):
            ids = expand_image(job.prompt, image_id, int(page.shape[0]))
            positions, delta = rope_index(ids, image_id, grid, model.merge)
            embeddings = model.prompt_embeddings(torch.tensor(ids, device=device), page)
            requests.append(GenerationRequest(None, ids, job.settings, prompt_embeddings=embeddings,
                                              prompt_positions=torch.from_numpy(positions), position_offset=delta))
        return requests

    def answer(self, prompt: list[int], generated: list[int], task: str | None,
               size: tuple[int, int] | None) -> Answer:
        return Answer(self.tokenizer.decode(generated, skip_special_tokens=True))


def build_generation_head(ctx: HeadContext) -> dict[str, GenerationHead]:
    return generation_heads(ctx, GlmOcrGeneration)


def generation_heads(ctx: HeadContext, head: type[GlmOcrGeneration]) -> dict[str, GenerationHead]:
    """The `generate` head of a model prompted by task whose inputs GlmOcrInputs (or a subclass) prepares."""
    if not isinstance(ctx.tokenizer, GlmOcrInputs):
        raise TypeError(f"{ctx.card.id}: the {ctx.card.family} family prepares its inputs with GlmOcrInputs (or its "
                        "subclass)")
    return {"generate": head(ctx.backbone, ctx.tokenizer.hf, Path(ctx.root), ctx.options("generate"),  # type: ignore[arg-type]
                             ctx.card.id, ctx.dtype)}


# new tokens a page of a card-less directory may ask for (the built-in card's bound)
LOCAL_MAX_NEW_TOKENS = 4096
DEFAULT_MAX_PIXELS = 28 * 28 * 15000  # Glm46VImageProcessor's default size.longest_edge


def local_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A card-less directory: every task (the request's `task`, text by default)."""
    return task_prompted_card(name, root, GlmOcrConfig.from_hf(config).max_seq_len, "glm_ocr", DEFAULT_MAX_PIXELS,
                              f"GLM-OCR from {root} (task: text, formula, table or custom with a prompt)")


def task_prompted_card(name: str, root: Path, positions: int, family: str, default_max_pixels: int,
                       description: str) -> ModelCard:
    """The card of a card-less directory of a model prompted by task (`task_prompt: "{task}"`), its
    image bound from its processor's max pixels."""
    from ...card import ModelCard, WeightsSource

    # admission's bound before the processor loads: the side of a square of its max pixels (as the card's)
    most = (read_image_processor_config(Path(root)).get("size") or {}).get("longest_edge") or default_max_pixels
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family=family, outputs=("generate",),
                     modalities=("image",), query_tower="image", image_size=math.isqrt(int(most)),
                     max_seq_len=positions,
                     max_batch_tokens=positions, pooling="none", normalize=False,
                     options={"generate": {"task_prompt": "{task}",
                                           "max_new_tokens": min(LOCAL_MAX_NEW_TOKENS, positions // 2)}},
                     description=description)
