"""Pages to Donut's answers: the checkpoint's image processor (DonutImageProcessor, PIL backend,
through sie_engine.images), the encoder once per page, the decode loop for every page's sequence
together, then Donut's post-processing as its documentation gives it: the decoded sequence without
EOS and padding, its first tag (the task start token) removed, and `token2json` over the rest.

The decoder prompt is the task's start token, with the question for DocVQA
(`<s_docvqa><s_question>{question}</s_question><s_answer>`), tokenised without special tokens.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...generation import DecodeLoop, GenerationRequest, GenerationSettings
from ...images import load_image_processor, read_image_processor_config
from .model import DonutModel
from .token2json import token2json


@dataclass
class DonutAnswer:
    text: str  # the generated sequence, task token, EOS and padding removed
    data: Any  # token2json(text)
    tokens: list[int]  # generated token ids (the prompt not included)
    prompt_tokens: int


def generation_config(root: Path) -> dict[str, Any]:
    """generation_config.json, or what transformers derives from config.json without one."""
    path = Path(root) / "generation_config.json"
    if path.is_file():
        return json.loads(path.read_text())
    decoder = json.loads((Path(root) / "config.json").read_text())["decoder"]
    return {k: decoder[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id", "forced_eos_token_id")
            if decoder.get(k) is not None}


def postprocess_sequence(tokenizer: Any, prompt: list[int], generated: list[int]) -> str:
    """Donut's documented post-processing: the decoded sequence without EOS and padding, its first
    tag (the task start token) removed."""
    sequence = tokenizer.decode(prompt + generated)
    for special in (tokenizer.eos_token, tokenizer.pad_token):
        if special:
            sequence = sequence.replace(special, "")
    return re.sub(r"<.*?>", "", sequence, count=1).strip()


class DonutReader:
    def __init__(self, model: DonutModel, root: Path, device: torch.device, dtype: torch.dtype,
                 max_rows: int = 64):
        from transformers import AutoTokenizer

        self.model, self.device, self.dtype = model, device, dtype
        self.processor = load_image_processor(Path(root))
        size = read_image_processor_config(Path(root)).get("size")
        processed = self.processor.size  # Donut's processor takes a [width, height] list: read its parsed size
        if (processed.height, processed.width) != model.config.encoder.image_size:
            raise ValueError(f"{root}: the image processor's size {size} gives {processed.height}x{processed.width} "
                             f"pages, the encoder's image_size is {list(model.config.encoder.image_size)}")
        self.tokenizer = AutoTokenizer.from_pretrained(str(root))
        self.added_vocab = set(self.tokenizer.get_added_vocab())
        self.generation = generation_config(Path(root))
        self.loop = DecodeLoop(model, device, dtype, max_rows=max_rows)

    def settings(self, **overrides: Any) -> GenerationSettings:
        return GenerationSettings.from_generation_config(self.generation, **overrides)

    def prompt_ids(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])

    def pixels(self, images: list[Any]) -> torch.Tensor:
        """PIL images -> `[B, C, H, W]` float32, DonutImageProcessor's output."""
        arrays = [self.processor(images=[img], return_tensors="np")["pixel_values"][0] for img in images]
        return torch.from_numpy(np.stack(arrays).astype(np.float32))

    def postprocess(self, prompt: list[int], generated: list[int]) -> str:
        return postprocess_sequence(self.tokenizer, prompt, generated)

    @torch.inference_mode()
    def read(self, images: list[Any], prompts: list[str], settings: GenerationSettings) -> list[DonutAnswer]:
        memory = self.model.encode_images(self.pixels(images).to(self.device, self.dtype))
        ids = [self.prompt_ids(p) for p in prompts]
        results = self.loop.run([GenerationRequest(memory[i], p, settings) for i, p in enumerate(ids)])
        answers = []
        for p, result in zip(ids, results, strict=True):
            text = self.postprocess(p, result.tokens)
            answers.append(DonutAnswer(text, token2json(text, self.added_vocab), result.tokens, len(p)))
        return answers
