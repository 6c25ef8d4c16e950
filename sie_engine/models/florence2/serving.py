"""Florence-2 served through extract: its input preparation (the checkpoint's BART tokenizer for the
encoder's prompt, CLIPImageProcessor for images), its `generate` head (generation/head.py) and the
card of a card-less Florence-2 directory.

A Florence-2 card's `options.generate.task_prompt` is `{task}`: a request names a task token
(`task`: `<OCR>`, `<OD>`, ...) and, for the tasks that take one, its text input (`prompt`);
tasks/generate.py builds the processor's prompt from them (tasks.py), tokenised here as
`<s>` prompt `</s>`. A fine-tune taught a task of its own has that task's token before the
request's text instead (`<DocVQA>{prompt}`), and its answers are that task's. Unlike Donut's, that
prompt is the encoder's, read beside the image's tokens: the decoder starts from
`decoder_start_token_id` alone. Answers are the generated sequence decoded
with its special tokens and post-processed as `Florence2Processor.post_process_generation` does
(postprocess.py), in the original image's pixels: `text`, `data` (`{task: answer}`, transformers'
shape) and `regions` (boxes, OCR quad boxes, polygons) for the tasks that locate things.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...checkpoints import CheckpointLayout, describe
from ...generation.head import Answer, GenerationHead, generate_options
from ...generation.settings import GenerationSettings
from ...images import ImagePreprocessor, load_image_processor, read_image_processor_config
from ...tokenizer import VocabularyLookup
from . import postprocess
from .model import ENCODE_BATCH, Florence2Config, Florence2Model
from .reader import generation_config, image_tokens, processor_config
from .tasks import POST_PROCESSING

if TYPE_CHECKING:
    from ...card import ModelCard
    from ...heads.context import HeadContext


class Florence2Inputs(VocabularyLookup):
    """The checkpoint's tokenizer (transformers', for the encoder's prompt and for decoding answers
    as Florence2Processor does) and, as `images`, its image processor; an image is the image
    tokens it fills in the encoder (what admission counts it as, beside its generated tokens)."""

    images: ImagePreprocessor

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        from transformers import AutoTokenizer, BartConfig

        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        root = Path(layout.root)
        vision = Florence2Config.from_hf(layout.config).vision
        # transformers cannot parse the original layout's config.json (its `florence2_language` text config),
        # which AutoTokenizer reads first: the tokenizer is BART's, as tokenizer_config.json names it
        extra = {"config": BartConfig()} if vision.original_layout else {}
        self.hf = AutoTokenizer.from_pretrained(str(root), trust_remote_code=trust_remote_code, **extra)
        self._tok = self.hf.backend_tokenizer
        self.special_ids = frozenset(self.hf.all_special_ids)
        processor = load_image_processor(root)
        size = processor.size
        tokens = image_tokens(root, vision, size)
        self.images = ImagePreprocessor(processor, max(size.height, size.width), tokens)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The encoder's text ids: `<s>` prompt `</s>` tokenised without added specials (Florence2Processor's)."""
        return list(self.hf(self.hf.bos_token + prompt + self.hf.eos_token, add_special_tokens=False)["input_ids"])


class Florence2Generation(GenerationHead):
    encode_batch = ENCODE_BATCH
    takes_prompt = False  # the prompt is the encoder's

    def __init__(self, model: Florence2Model, tokenizer: Any, image_tokens: int, root: Path,
                 options: Mapping[str, Any], card_id: str, dtype: torch.dtype):
        super().__init__()
        self.hold(model)
        self.tokenizer = tokenizer  # transformers' (Florence2Inputs.hf)
        task_prompt, self.max_new_tokens, overrides = generate_options(options, card_id)
        self.own_task = own_task_token(task_prompt, card_id)
        self.generation = {**generation_config(root), **overrides}
        start = self.generation.get("decoder_start_token_id")
        if start is None:
            raise ValueError(f"{root}: no decoder_start_token_id in generation_config.json nor the text config")
        self.start = [int(start)]
        self.default = GenerationSettings.from_generation_config(self.generation, max_new_tokens=self.max_new_tokens)
        self.post_config = processor_config(root).get("post_processor_config") or postprocess.DEFAULT_CONFIG
        self.element_size = torch.empty((), dtype=dtype).element_size()
        # the encoder's learned positions hold the image's tokens and the prompt's
        self.encoder_prompt_tokens = model.config.text.max_position_embeddings - image_tokens
        if self.encoder_prompt_tokens < 1:
            raise ValueError(f"card {card_id}: {image_tokens} image tokens fill the encoder's "
                             f"{model.config.text.max_position_embeddings} positions")
        if len(self.start) + self.max_new_tokens > model.decoder_positions:
            raise ValueError(f"card {card_id}: options.generate.max_new_tokens {self.max_new_tokens} plus the "
                             f"decoder's start token exceed its {model.decoder_positions} positions")

    def settings(self, max_new_tokens: int) -> GenerationSettings:
        return self.default.with_overrides(max_new_tokens=max_new_tokens)

    def encode(self, pixels: torch.Tensor, prompts: list[list[int]]) -> list[torch.Tensor]:
        """Images `[B, C, H, W]` and their prompts -> each one's encoder states `[N + len(prompt_i), d]`."""
        model: Florence2Model = self.model  # type: ignore[assignment]
        return model.encode(model.encode_images(pixels), prompts)

    def decoder_prompt(self, prompt: list[int]) -> list[int]:
        return self.start

    def answer(self, prompt: list[int], generated: list[int], task: str | None,
               size: tuple[int, int] | None) -> Answer:
        task = task or self.own_task
        if task is None or size is None:
            raise ValueError("a Florence-2 answer needs the request's task and the image's size")
        decoded = self.tokenizer.decode(self.start + generated, skip_special_tokens=False)
        answer = postprocess.post_process_generation(decoded, task, size, self.post_config)
        if POST_PROCESSING.get(task, "pure_text") == "pure_text":
            return Answer(answer, {task: answer})
        regions = [r.to_dict() for r in postprocess.regions(task, answer)]
        return Answer(postprocess.strip_specials(decoded).strip(), {task: answer}, regions)


def own_task_token(task_prompt: str, card_id: str) -> str | None:
    """None for a card prompted by task (`{task}`: the base checkpoints know every task token); for a
    fine-tune taught a task of its own, the token its card's prompt puts before the request's text
    (`<DocVQA>{prompt}`: HuggingFaceM4/Florence-2-DocVQA's question). That token names its answer, as
    `post_process_generation(task=...)` does in the fine-tune's recipe: pure text, the processor's parse
    for a task it does not know."""
    if task_prompt == "{task}":
        return None
    token, placeholder, rest = task_prompt.partition("{prompt}")
    if not placeholder or rest or not re.fullmatch(r"<[^<>{}]+>", token):
        raise ValueError(f"card {card_id}: options.generate.task_prompt must be \"{{task}}\" (a request names its "
                         "task token) or a fine-tune's task token before the request's text, as "
                         f"\"<DocVQA>{{prompt}}\"; got {task_prompt!r}")
    return token


def build_generation_head(ctx: HeadContext) -> dict[str, GenerationHead]:
    inputs = ctx.tokenizer
    if not isinstance(inputs, Florence2Inputs):
        raise TypeError(f"{ctx.card.id}: the Florence-2 family prepares its inputs with Florence2Inputs")
    head = Florence2Generation(ctx.backbone, inputs.hf, inputs.images.image_tokens,  # type: ignore[arg-type]
                               Path(ctx.root), ctx.options("generate"), ctx.card.id, ctx.dtype)
    return {"generate": head}


# A card-less directory: every task (the request's `task`), generating up to Florence-2's documented
# max_new_tokens (1024) within what its decoder's positions leave beside the start token.
def local_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    from ...card import ModelCard, WeightsSource

    positions = Florence2Config.from_hf(config).text.max_position_embeddings
    size = read_image_processor_config(Path(root)).get("size") or {}
    image_size = max(int(size.get("height", 768)), int(size.get("width", 768)))
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="florence2", outputs=("generate",),
                     modalities=("image",), query_tower="image", image_size=image_size, max_seq_len=positions,
                     max_batch_tokens=max(16384, positions), pooling="none", normalize=False,
                     options={"generate": {"task_prompt": "{task}", "max_new_tokens": min(1024, positions - 1)}},
                     description=f"Florence-2 from {root} (send a task token as `task`, its text input as `prompt`)")
