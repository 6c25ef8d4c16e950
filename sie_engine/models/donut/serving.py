"""Donut served through extract: its input preparation (the checkpoint's tokenizer for decoder
prompts, DonutImageProcessor for pages), its `generate` head (generation/head.py: the encoder, the
decoding settings, Donut's documented post-processing and token2json) and the card of a card-less
Donut directory.

The prompt is the card's `options.generate.task_prompt` (`<s_cord-v2>`, `<s_rvlcdip>`), with a
request's `prompt` in its `{prompt}` where it has one (DocVQA:
`<s_docvqa><s_question>{prompt}</s_question><s_answer>`), tokenised without special tokens, as
Donut's model cards do. The decoding settings are the checkpoint's generation config with the
card's `generation` overrides (Donut's cards ban `<unk>`, as its documented `generate` call does).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...checkpoints import CheckpointLayout, describe
from ...generation.head import Answer, GenerationHead, generate_options
from ...generation.settings import GenerationSettings
from ...images import ImagePreprocessor, load_image_processor
from ...tokenizer import VocabularyLookup
from .model import ENCODE_BATCH, DonutConfig, DonutModel
from .reader import generation_config, postprocess_sequence
from .token2json import token2json

if TYPE_CHECKING:
    from ...card import ModelCard
    from ...heads.context import HeadContext


class DonutInputs(VocabularyLookup):
    """The checkpoint's tokenizer (transformers', for prompts and for decoding answers exactly as
    DonutProcessor does) and, as `images`, its image processor; a page is the encoder's memory
    length in positions (what admission counts it as, beside its generated tokens)."""

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        from transformers import AutoTokenizer

        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        self.hf = AutoTokenizer.from_pretrained(str(layout.root), trust_remote_code=trust_remote_code)
        self._tok = self.hf.backend_tokenizer
        self.special_ids = frozenset(self.hf.all_special_ids)
        config = DonutConfig.from_hf(layout.config)
        processor = load_image_processor(layout.root)
        size = processor.size  # Donut's processor takes a [width, height] list: its parsed size is the truth
        if (size.height, size.width) != config.encoder.image_size:
            raise ValueError(f"{layout.root}: the image processor's size gives {size.height}x{size.width} pages, "
                             f"the encoder's image_size is {list(config.encoder.image_size)}")
        self.images = ImagePreprocessor(processor, max(config.encoder.image_size), config.encoder.memory_length())

    def prompt_ids(self, prompt: str) -> list[int]:
        return list(self.hf(prompt, add_special_tokens=False)["input_ids"])


class DonutGeneration(GenerationHead):
    encode_batch = ENCODE_BATCH
    def __init__(self, model: DonutModel, tokenizer: Any, root: Path, options: Mapping[str, Any], card_id: str,
                 dtype: torch.dtype):
        super().__init__()
        self.hold(model)
        self.tokenizer = tokenizer  # transformers' (DonutInputs.hf)
        self.added_vocab = set(tokenizer.get_added_vocab())
        self.task_prompt, self.max_new_tokens, overrides = generate_options(options, card_id)
        self.takes_prompt = "{prompt}" in self.task_prompt
        if overrides.pop("ban_unk", False):  # Donut's documented generate: bad_words_ids=[[unk_token_id]]
            overrides["bad_words_ids"] = [[tokenizer.unk_token_id]]
        self.generation = {**generation_config(root), **overrides}
        self.default = GenerationSettings.from_generation_config(self.generation, max_new_tokens=self.max_new_tokens)
        self.element_size = torch.empty((), dtype=dtype).element_size()
        needed = len(tokenizer(self.task_prompt.replace("{prompt}", ""), add_special_tokens=False)["input_ids"])
        if needed + self.max_new_tokens > model.decoder_positions:  # a request's prompt is checked per request
            raise ValueError(f"card {card_id}: options.generate.max_new_tokens {self.max_new_tokens} plus the task "
                             f"prompt's {needed} tokens exceed the decoder's {model.decoder_positions} positions")

    def settings(self, max_new_tokens: int) -> GenerationSettings:
        return self.default.with_overrides(max_new_tokens=max_new_tokens)

    def encode(self, pixels: torch.Tensor, prompts: list[list[int]]) -> torch.Tensor:
        model: DonutModel = self.model  # type: ignore[assignment]
        return model.encode_images(pixels)  # the prompt is the decoder's

    def answer(self, prompt: list[int], generated: list[int], task: str | None,
               size: tuple[int, int] | None) -> Answer:
        text = postprocess_sequence(self.tokenizer, prompt, generated)
        return Answer(text, token2json(text, self.added_vocab))


def build_generation_head(ctx: HeadContext) -> dict[str, GenerationHead]:
    if not isinstance(ctx.tokenizer, DonutInputs):
        raise TypeError(f"{ctx.card.id}: the Donut family prepares its inputs with DonutInputs")
    head = DonutGeneration(ctx.backbone, ctx.tokenizer.hf, Path(ctx.root), ctx.options("generate"),  # type: ignore[arg-type]
                           ctx.card.id, ctx.dtype)
    return {"generate": head}


# A card-less directory's decoder prompt and bound: the task start token of its generation config's
# decoder_start_token is not recorded by Donut's checkpoints, so the directory's card names none and
# takes the request's prompt whole (`{prompt}`); the bound is what its decoder's positions leave.
def local_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    from ...card import ModelCard, WeightsSource

    positions = DonutConfig.from_hf(config).decoder.max_position_embeddings
    image_size = max(DonutConfig.from_hf(config).encoder.image_size)
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="donut", outputs=("generate",),
                     modalities=("image",), query_tower="image", image_size=image_size, max_seq_len=positions,
                     max_batch_tokens=max(16384, positions), pooling="none", normalize=False,
                     options={"generate": {"task_prompt": "{prompt}", "max_new_tokens": min(512, positions - 8)}},
                     description=f"Donut document model from {root} (send the task prompt as `prompt`)")

