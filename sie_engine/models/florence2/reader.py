"""Images to Florence-2's answers: the checkpoint's image processor (CLIPImageProcessor, PIL backend,
through sie_engine.images), the vision tower once per image, the BART encoder over the image's
tokens and the task's prompt (`<s>` prompt `</s>`, as Florence2Processor builds it, its `<image>`
placeholders being the image's tokens), the decode loop for every image's sequence together, then
`Florence2Processor.post_process_generation` on the generated sequence decoded with its special
tokens (postprocess.py), boxes in the original image's pixels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...generation import DecodeLoop, GenerationRequest, GenerationSettings
from ...images import load_image_processor, read_image_processor_config
from . import postprocess
from .model import Florence2Model
from .tasks import POST_PROCESSING, task_prompt


@dataclass
class Florence2Answer:
    task: str
    # the generated text without <s>, </s> and <pad> (location tokens kept): a text task's answer
    text: str
    answer: Any  # post_process_generation's value for the task (transformers' shape)
    regions: list[postprocess.Region] = field(default_factory=list)  # in the image's pixels
    tokens: list[int] = field(default_factory=list)  # generated token ids (the decoder's start token not included)
    prompt_tokens: int = 0  # the encoder's text tokens (image tokens not counted)
    finish_reason: str = "stop"


def generation_config(root: Path) -> dict[str, Any]:
    """generation_config.json, or what transformers derives from the text config without one."""
    path = Path(root) / "generation_config.json"
    if path.is_file():
        return json.loads(path.read_text())
    text = json.loads((Path(root) / "config.json").read_text()).get("text_config", {})
    keys = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_eos_token_id",
            "forced_bos_token_id")
    return {k: text[k] for k in keys if text.get(k) is not None}


def processor_config(root: Path) -> dict[str, Any]:
    path = Path(root) / "processor_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def image_tokens(root: Path, vision: Any, size: Any) -> int:
    """The image tokens the processor's `size` gives the vision tower; ValueError where they are not the
    processor's `image_seq_length` or the patch grid passes the projector's learned positions."""
    tokens = vision.image_tokens(size.height, size.width)
    expected = read_image_processor_config(root).get("image_seq_length", tokens)
    if tokens != expected:
        raise ValueError(f"{root}: {size.height}x{size.width} images give {tokens} image tokens, the processor's "
                         f"image_seq_length is {expected}")
    grid = vision.grid(size.height, size.width)
    if max(grid) > vision.max_position_embeddings:
        raise ValueError(f"{root}: {size.height}x{size.width} images give a {grid[0]}x{grid[1]} grid, beyond the "
                         f"projector's {vision.max_position_embeddings} learned positions per side")
    return tokens


class Florence2Reader:
    def __init__(self, model: Florence2Model, root: Path, device: torch.device, dtype: torch.dtype,
                 max_rows: int = 64):
        from transformers import AutoTokenizer, BartConfig

        root = Path(root)
        self.model, self.device, self.dtype = model, device, dtype
        self.processor = load_image_processor(root)
        size = self.processor.size
        vision = model.config.vision
        image_tokens(root, vision, size)
        # transformers cannot parse the original layout's config.json (its `florence2_language` text config),
        # which AutoTokenizer reads first: the tokenizer is BART's, as tokenizer_config.json names it
        extra = {"config": BartConfig()} if vision.original_layout else {}
        self.tokenizer = AutoTokenizer.from_pretrained(str(root), **extra)
        config = processor_config(root)
        self.post_config = config.get("post_processor_config") or postprocess.DEFAULT_CONFIG
        self.generation = generation_config(root)
        start = self.generation.get("decoder_start_token_id")
        if start is None:
            raise ValueError(f"{root}: no decoder_start_token_id in generation_config.json nor the text config")
        self.decoder_prompt = [int(start)]
        self.loop = DecodeLoop(model, device, dtype, max_rows=max_rows)

    def settings(self, **overrides: Any) -> GenerationSettings:
        return GenerationSettings.from_generation_config(self.generation, **overrides)

    def prompt_ids(self, task: str, text: str | None = None) -> list[int]:
        """The encoder's text ids for a task: `<s>` prompt `</s>` tokenised without added specials."""
        prompt = self.tokenizer.bos_token + task_prompt(task, text) + self.tokenizer.eos_token
        return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def pixels(self, images: list[Any]) -> torch.Tensor:
        """PIL images -> `[B, C, H, W]` float32, the image processor's output."""
        arrays = [self.processor(images=[img.convert("RGB")], return_tensors="np")["pixel_values"][0]
                  for img in images]
        return torch.from_numpy(np.stack(arrays).astype(np.float32))

    def answer(self, task: str, generated: list[int], image_size: tuple[int, int]) -> tuple[str, Any]:
        """Generated ids -> (text, transformers' answer) for `task` on an image of (width, height)."""
        decoded = self.tokenizer.decode(self.decoder_prompt + generated, skip_special_tokens=False)
        answer = postprocess.post_process_generation(decoded, task, image_size, self.post_config)
        text = answer if POST_PROCESSING[task] == "pure_text" else postprocess.strip_specials(decoded).strip()
        return text, answer

    @torch.inference_mode()
    def read(self, images: list[Any], tasks: list[str], settings: GenerationSettings,
             texts: list[str | None] | None = None) -> list[Florence2Answer]:
        """One answer per image: `tasks[i]` (and `texts[i]` where the task takes an input) on `images[i]`."""
        texts = texts or [None] * len(images)
        ids = [self.prompt_ids(task, text) for task, text in zip(tasks, texts, strict=True)]
        image_tokens = self.model.encode_images(self.pixels(images).to(self.device, self.dtype))
        memory = self.model.encode(image_tokens, ids)
        results = self.loop.run([GenerationRequest(m, self.decoder_prompt, settings) for m in memory])
        answers = []
        for image, task, p, result in zip(images, tasks, ids, results, strict=True):
            text, answer = self.answer(task, result.tokens, image.size)
            answers.append(Florence2Answer(task, text, answer, postprocess.regions(task, answer), result.tokens,
                                           len(p), result.finish_reason))
        return answers
