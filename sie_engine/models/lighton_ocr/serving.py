"""LightOnOCR served through extract: its input preparation (the checkpoint's tokenizer and chat
template for the prompt, PixtralImageProcessor for pages: each resized within `longest_edge` to a
multiple of the patch, at its own aspect ratio), its `generate` head (generation/head.py: the
vision tower over the joining pages, their features spliced into their prompts, a decoder-only
request each) and the card of a card-less LightOnOCR directory.

The prompt is the checkpoint's chat template over one user message: the page, then the card's
text, if any. The card's `options.generate.task_prompt` says where the page goes: `{image}` (the
OCR cards: the page alone, as LightOnOCR's model cards prompt it), `{image}{prompt}` for a card
that takes a request's text after the page. The rendered prompt holds one image token; a page's
request holds as many as the page has image features (LightOnOcrProcessor's `replace_image_token`:
(height / 28) * (width / 28) for patch 14, merge 2; no break or end tokens). The answer is the
generated text decoded without special tokens, as the model cards decode it (markdown).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...checkpoints import CheckpointLayout, describe
from ...generation.head import Answer, GenerationHead, generate_options
from ...generation.loop import GenerationRequest
from ...generation.settings import GenerationSettings
from ...images import ImagePreprocessor, load_image_processor, read_image_processor_config
from ...tokenizer import VocabularyLookup
from .model import LightOnOcrConfig, LightOnOcrModel

if TYPE_CHECKING:
    from ...card import ModelCard
    from ...generation.job import Job
    from ...heads.context import HeadContext

IMAGE = "{image}"
# pages the vision tower runs together as they join the decode batch (a 1540 px page is ~12,000 patches)
ENCODE_BATCH = 2


def longest_edge(root: Path) -> int:
    size = read_image_processor_config(Path(root)).get("size") or {}
    edge = size.get("longest_edge")
    if not isinstance(edge, int) or edge < 1:
        raise ValueError(f"{root}: the Pixtral image processor's size has no longest_edge")
    return edge


class LightOnOcrInputs(VocabularyLookup):
    """The checkpoint's tokenizer (transformers', with its chat template: prompts, and answers
    decoded as the processor decodes them) and, as `images`, its image processor; a page counts,
    before it is seen, as the image features of the largest page (`longest_edge` square)."""

    images: ImagePreprocessor

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        from transformers import AutoTokenizer

        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        root = Path(layout.root)
        self.hf = AutoTokenizer.from_pretrained(str(root), trust_remote_code=trust_remote_code)
        self._tok = self.hf.backend_tokenizer
        self.special_ids = frozenset(self.hf.all_special_ids)
        self.config = LightOnOcrConfig.from_hf(layout.config)
        self.image_token = self.hf.convert_ids_to_tokens(self.config.image_token_id)
        processor = load_image_processor(root)
        edge = longest_edge(root)
        self.images = ImagePreprocessor(processor, edge, (edge // self.config.block) ** 2)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The card's prompt with the request's text in it (`{image}` where the page goes) -> the chat
        template's ids, one image token in the page's place."""
        if IMAGE not in prompt:
            raise ValueError(f"a LightOnOCR prompt holds {IMAGE} where the page goes, got {prompt!r}")
        before, after = prompt.split(IMAGE, 1)
        content: list[dict[str, str]] = [{"type": "text", "text": before}] if before else []
        content.append({"type": "image"})
        if after:
            content.append({"type": "text", "text": after})
        text = self.hf.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                           tokenize=False)
        if self.image_token not in text:  # a template that renders images otherwise: put the token there
            raise ValueError(f"the checkpoint's chat template renders no {self.image_token} for an image")
        return list(self.hf(text, add_special_tokens=False)["input_ids"])


def generation_config(root: Path) -> dict[str, Any]:
    """generation_config.json, or what transformers derives from config.json without one."""
    path = Path(root) / "generation_config.json"
    if path.is_file():
        return dict(json.loads(path.read_text()))
    config = json.loads((Path(root) / "config.json").read_text())
    text = config.get("text_config") or {}
    return {k: config.get(k, text.get(k)) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
            if config.get(k, text.get(k)) is not None}


class LightOnOcrGeneration(GenerationHead):
    encode_batch = ENCODE_BATCH

    def __init__(self, model: LightOnOcrModel, tokenizer: Any, root: Path, options: Mapping[str, Any],
                 card_id: str, dtype: torch.dtype, image_tokens: int):
        """image_tokens: the image features of the largest page (the processor's longest_edge square)."""
        super().__init__()
        self.hold(model)
        self.tokenizer = tokenizer
        task_prompt, self.max_new_tokens, overrides = generate_options(options, card_id)
        if not task_prompt.startswith(IMAGE):
            raise ValueError(f"card {card_id}: options.generate.task_prompt must start with {IMAGE} (the page, "
                             f"then any text, as LightOnOCR is prompted), got {task_prompt!r}")
        self.takes_prompt = "{prompt}" in task_prompt
        self.generation = {**generation_config(root), **overrides}
        self.default = GenerationSettings.from_generation_config(self.generation, max_new_tokens=self.max_new_tokens)
        self.element_size = torch.empty((), dtype=dtype).element_size()
        self.image_token_id = model.config.image_token_id
        self.block = model.config.block
        self.page_prompt_tokens = image_tokens - 1  # the rendered prompt holds one image token already
        # the largest page's features, the chat prompt's tokens beside them and the answer fit the decoder
        # (a request's own text is checked per request)
        prompt = len(tokenizer(task_prompt.replace(IMAGE, "").replace("{prompt}", ""), add_special_tokens=False)
                     ["input_ids"])
        if image_tokens + prompt + self.max_new_tokens > model.decoder_positions:
            raise ValueError(f"card {card_id}: options.generate.max_new_tokens {self.max_new_tokens} plus the "
                             f"largest page's {image_tokens} image tokens exceed the decoder's "
                             f"{model.decoder_positions} positions")

    def settings(self, max_new_tokens: int) -> GenerationSettings:
        return self.default.with_overrides(max_new_tokens=max_new_tokens)

    def page_ids(self, prompt: list[int], height: int, width: int) -> list[int]:
        """The rendered prompt's one image token -> the page's (its image features' count)."""
        at = prompt.index(self.image_token_id)
        count = (height // self.block) * (width // self.block)
        return prompt[:at] + [self.image_token_id] * count + prompt[at + 1:]

    def requests(self, jobs: Sequence[Job], device: torch.device, dtype: torch.dtype) -> list[GenerationRequest]:
        """Each page at its own size through the vision tower (packed), its features in its prompt."""
        model: LightOnOcrModel = self.model  # type: ignore[assignment]
        pages = [torch.from_numpy(job.pixels).to(device, dtype) for job in jobs if job.pixels is not None]
        features = model.image_features(pages)
        requests = []
        for job, page, feats in zip(jobs, pages, features, strict=True):
            ids = self.page_ids(job.prompt, page.shape[-2], page.shape[-1])
            embeddings = model.page_prompt(torch.tensor(ids, device=device), feats)
            requests.append(GenerationRequest(None, ids, job.settings, prompt_embeddings=embeddings))
        return requests

    def answer(self, prompt: list[int], generated: list[int], task: str | None,
               size: tuple[int, int] | None) -> Answer:
        return Answer(self.tokenizer.decode(generated, skip_special_tokens=True))


def build_generation_head(ctx: HeadContext) -> dict[str, GenerationHead]:
    if not isinstance(ctx.tokenizer, LightOnOcrInputs):
        raise TypeError(f"{ctx.card.id}: the LightOnOCR family prepares its inputs with LightOnOcrInputs")
    inputs = ctx.tokenizer
    head = LightOnOcrGeneration(ctx.backbone, inputs.hf, Path(ctx.root), ctx.options("generate"),  # type: ignore[arg-type]
                                ctx.card.id, ctx.dtype, inputs.images.image_tokens)
    return {"generate": head}


# A card-less directory: the page alone (LightOnOCR's OCR prompt), generating up to the model cards'
# max_new_tokens (1024) within the decoder's positions.
def local_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    from ...card import ModelCard, WeightsSource

    positions = LightOnOcrConfig.from_hf(config).text.max_position_embeddings
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="lighton_ocr", outputs=("generate",),
                     modalities=("image",), query_tower="image", image_size=longest_edge(root),
                     max_seq_len=positions, max_batch_tokens=max(16384, positions), pooling="none", normalize=False,
                     options={"generate": {"task_prompt": IMAGE, "max_new_tokens": min(1024, positions // 2)}},
                     description=f"LightOnOCR from {root}: each page's text, as markdown")
