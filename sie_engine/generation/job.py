"""One page a generative model reads (generation/worker.py queues it, a head turns it into a
request): apart from the worker, so that a head can name it without importing the worker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from .settings import GenerationSettings


@dataclass
class Job:
    """One page to read: its pixels `[C, H, W]` (each page its own size where the model reads pages
    at their size: a vision-language model's), its prompt (token ids: the decoder's for Donut; a
    model whose encoder reads the prompt too, as Florence-2's, takes it there; a vision-language
    model's text prompt, its image tokens added by the head) and settings."""

    pixels: np.ndarray | None  # None once encoded
    prompt: list[int]
    settings: GenerationSettings
    future: asyncio.Future = field(init=False, repr=False)

    @property
    def charge_positions(self) -> int:
        return (self.prompt_length or len(self.prompt)) + self.settings.max_new_tokens

    memory_length: int = 0  # encoder positions, once encoded
    prompt_length: int = 0  # the decoder prompt's tokens, once joined (a vision-language model's: its image's too)
    task: str | None = None  # the request's task token (Florence-2's), for the answer
    size: tuple[int, int] | None = None  # the page's (width, height) as sent: its answer's boxes are in these
