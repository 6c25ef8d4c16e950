"""The `generate` output's head: what a document model (Donut, Florence-2) offers the engine's
decode worker (generation/worker.py) beyond its backbone.

A generative model has no packed hidden states to pool: its head is the model's reading of a page
(encoder once per page, decoder prompt, decoding settings, the answer parsed from the generated
tokens). The runner never calls it as a batch head (`reads_hidden` is False and the extract mode
sends it no work items); the worker calls these methods on an inference thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from ..heads.base import Head
from .loop import DecoderOnlyLM, EncoderDecoderLM, GenerationRequest
from .settings import GenerationSettings

if TYPE_CHECKING:
    from .worker import Job


@dataclass
class Answer:
    """One page's answer: `text` as the model emits it (task token, EOS and padding removed),
    `data` its parsed JSON (None where the model has no structured output), `regions` where the
    model gives boxes (`[{label, score?, text?, box}]` in the page's pixels; None: it gives none)."""

    text: str
    data: Any = None
    regions: list[dict[str, Any]] | None = None


class GenerationHead(Head):
    """A generative model's reading of pages. `model` is the backbone (an EncoderDecoderLM with
    `encode_images`, or a DecoderOnlyLM whose head builds its requests); it is held, not registered, so the runner's
    tensors are the backbone's once.

    max_new_tokens: the card's bound (and default) of generated tokens per page;
    takes_prompt: whether a request's `prompt` goes into the decoder prompt (DocVQA's question);
    encoder_prompt_tokens: the most prompt tokens the encoder reads beside a page, for a model whose
    encoder reads the prompt (Florence-2: its positions less the image's); None: it reads none."""

    reads_hidden: ClassVar[bool] = False
    # pages the encoder runs together as they join the decode batch
    encode_batch: ClassVar[int] = 2
    max_new_tokens: int
    takes_prompt: bool
    encoder_prompt_tokens: int | None = None

    @property
    def model(self) -> EncoderDecoderLM | DecoderOnlyLM:
        return self.__dict__["_model"]  # type: ignore[no-any-return]

    def hold(self, model: EncoderDecoderLM | DecoderOnlyLM) -> None:
        self.__dict__["_model"] = model  # not an nn.Module child: its tensors are counted once, as the backbone's

    def settings(self, max_new_tokens: int) -> GenerationSettings:
        """The decoding settings of a request asking for `max_new_tokens` (already within the card's)."""
        raise NotImplementedError

    def encode(self, pixels: torch.Tensor, prompts: list[list[int]]) -> Sequence[torch.Tensor]:
        """Pages `[B, C, H, W]` (the processor's) and their prompts -> each page's encoder states
        `[S_i, H]` (a `[B, S, H]` tensor where all have one length). Donut's encoder reads the pixels
        only; a model whose encoder reads the prompt beside the image (Florence-2) uses `prompts`."""
        raise NotImplementedError

    def requests(self, jobs: Sequence[Job], device: torch.device, dtype: torch.dtype) -> list[GenerationRequest]:
        """Pages joining the decode batch together -> their generation requests (on an inference
        thread, in inference mode). An encoder-decoder model's (this default): the pages stacked,
        `encode`d, each page's states its memory and `decoder_prompt(prompt)` its prompt. A
        decoder-only (vision-language) model overrides it: each page at its own size through the
        vision tower, its features spliced into the prompt's embeddings where its image tokens are,
        with the prompt's position ids and offset (loop.DecoderOnlyLM says what they mean)."""
        pixels = torch.from_numpy(np.stack([job.pixels for job in jobs]))
        memory = self.encode(pixels.to(device, dtype), [job.prompt for job in jobs])
        return [GenerationRequest(states, self.decoder_prompt(job.prompt), job.settings)
                for states, job in zip(memory, jobs, strict=True)]

    def decoder_prompt(self, prompt: list[int]) -> list[int]:
        """The decoder's first tokens for a page prompted with `prompt` (Donut: the prompt itself;
        a model whose prompt went to the encoder: its decoder start tokens)."""
        return prompt

    def answer(self, prompt: list[int], generated: list[int], task: str | None,
               size: tuple[int, int] | None) -> Answer:
        """The generated tokens of one page (after `decoder_prompt(prompt)`) -> its answer; `task`
        is the request's task token (a model prompted by task: Florence-2), `size` the page's
        (width, height) as sent (the pixels its boxes are answered in)."""
        raise NotImplementedError

    def kv_bytes(self, rows: int, positions: int, memory: int) -> int:
        """Bytes the decode cache holds for `rows` rows of `positions` self-attention positions and
        `memory` encoder positions each (the pool's charge for sequences in flight; a decoder-only
        model's rows have no memory, `decoder_heads` are its key/value heads)."""
        m = self.model
        per_position = 2 * m.decoder_layers * m.decoder_heads * m.decoder_head_dim * self.element_size
        return rows * (positions + memory) * per_position

    element_size: int = 4

    def forward(self, hidden: Any, batch: Any, items: Any) -> Any:
        raise NotImplementedError("a generation head is run by the decode worker, not as a batch head")


def generate_options(options: Mapping[str, Any], card_id: str) -> tuple[str, int, dict[str, Any]]:
    """The card's `options.generate`: (`task_prompt`, `max_new_tokens`, `generation` overrides).
    `task_prompt` is the decoder prompt; `{prompt}` in it is where a request's prompt goes."""
    prompt = options.get("task_prompt")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"card {card_id}: options.generate.task_prompt (the decoder prompt, e.g. <s_cord-v2>) "
                         "is required")
    bound = options.get("max_new_tokens")
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
        raise ValueError(f"card {card_id}: options.generate.max_new_tokens must be a positive integer")
    overrides = options.get("generation") or {}
    if not isinstance(overrides, Mapping):
        raise ValueError(f"card {card_id}: options.generate.generation maps generation_config fields to values")
    return prompt, bound, dict(overrides)


def build(ctx: Any) -> dict[str, Head]:
    """The shared builder of the `generate` output: a family that generates brings its own
    (`Family(heads=(("generate", ...),))`); any other is refused at load, naming the families."""
    raise ValueError(f"{ctx.card.id}: output 'generate' needs a document model family that generates (Donut); "
                     f"this checkpoint's family does not")
