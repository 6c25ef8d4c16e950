"""Idefics3 (granite-docling, SmolDocling) served through extract: its input preparation (the
checkpoint's tokenizer and chat template for the prompt, Idefics3ImageProcessor for pages), its
`generate` head (generation/head.py) and the card of a card-less Idefics3 directory.

- The prompt: the checkpoint's chat template over one user turn, the page then the card's
  `task_prompt` ("Convert this page to docling.", as docling and the model cards prompt it), with
  the generation prompt. Its one `<image>` stands for the page's tiles, expanded as
  Idefics3Processor does: per tile `<fake_token_around_image><row_r_col_c>` and `image_seq_len`
  `<image>`s, a newline after each row of tiles, then a newline and the global view
  (`<fake_token_around_image><global-img>`, its `<image>`s, `<fake_token_around_image>`); a page
  small enough for one tile is the global view alone. Special tokens delimit every part, so the
  expansion tokenises alone as it does in place.
- A page's pixels: the processor's (resize the longest edge to `size.longest_edge`, grow each side
  to a multiple of the tile, cut the tiles, the whole page resized to one tile last; rescale and
  normalise), `[tiles, C, S, S]`. Its grid of tiles follows from the page's size as the processor
  computes it (`tile_grid`), checked against the tiles it made.
- The answer: the generated tokens without the stop token, decoded WITH the special tokens
  (DocTags are the vocabulary's added tokens: `<doctag>`, `<loc_..>`, `<text>`), left-stripped,
  as the model cards' `processor.batch_decode(..., skip_special_tokens=False)[0].lstrip()`.
  Converting DocTags to markdown or a DoclingDocument needs the `docling-core` library, which SIE
  does not install: the text is the DocTags markup.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...checkpoints import CheckpointLayout, describe
from ...generation.head import Answer, GenerationHead, generate_options
from ...generation.loop import GenerationRequest
from ...generation.settings import GenerationSettings
from ...images import ImagePreprocessor, prepare_images, read_image_processor_config
from ...tokenizer import VocabularyLookup
from ..florence2.reader import generation_config
from .model import Idefics3Config, Idefics3Model

if TYPE_CHECKING:
    from ...card import ModelCard
    from ...generation.worker import Job
    from ...heads.context import HeadContext

IMAGE_TOKEN, FAKE_TOKEN, GLOBAL_TAG = "<image>", "<fake_token_around_image>", "<global-img>"  # Idefics3Processor's
DOCLING_PROMPT = "Convert this page to docling."  # docling's and the model cards' full-page prompt


def tile_grid(processor: Any, width: int, height: int) -> tuple[int, int]:
    """(rows, columns) of tiles Idefics3ImageProcessor cuts a `width` x `height` page into ((0, 0):
    one tile, the global view alone), by its own resize steps: the longest edge to
    `size.longest_edge` (capped at MAX_IMAGE_SIZE), then each side up to a multiple of the tile."""
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        MAX_IMAGE_SIZE,
        _resize_output_size_rescale_to_max_len,
        _resize_output_size_scale_below_upper_bound,
    )

    if not processor.do_image_splitting:
        return 0, 0
    tile = int(processor.max_image_size["longest_edge"])
    if processor.do_resize:
        height, width = _resize_output_size_rescale_to_max_len(height, width, max_len=processor.size["longest_edge"])
        height, width = _resize_output_size_scale_below_upper_bound(height, width, max_len=MAX_IMAGE_SIZE)
    aspect = width / height  # resize_for_vision_encoder: the longer side first, the other from the aspect
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / aspect) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * aspect) / tile) * tile
    if height > tile or width > tile:
        return height // tile, width // tile
    return 0, 0


def image_text(rows: int, columns: int, image_seq_len: int) -> str:
    """What Idefics3Processor writes for one `<image>` of a page cut into rows x columns tiles."""
    global_view = f"{FAKE_TOKEN}{GLOBAL_TAG}{IMAGE_TOKEN * image_seq_len}{FAKE_TOKEN}"
    if rows == 0 and columns == 0:
        return global_view
    tiles = "".join("".join(f"{FAKE_TOKEN}<row_{r + 1}_col_{c + 1}>{IMAGE_TOKEN * image_seq_len}"
                            for c in range(columns)) + "\n" for r in range(rows))
    return f"{tiles}\n{global_view}"


def load_idefics3_image_processor(root: Path) -> Any:
    """The checkpoint's Idefics3ImageProcessor, its PIL implementation from transformers' module
    (the top-level name of that class asks for torchvision, which SIE leaves out)."""
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    config = read_image_processor_config(root)
    name = config.get("image_processor_type") or ""
    if name.removesuffix("Pil") != "Idefics3ImageProcessor":
        raise ValueError(f"{root}: image processor {name!r} is not Idefics3ImageProcessor")
    return Idefics3ImageProcessorPil.from_dict({k: v for k, v in config.items()
                                                if k not in ("image_processor_type", "processor_class")})


def read_chat_template(root: Path, tokenizer: Any) -> str:
    """The checkpoint's chat template: the tokenizer's, `chat_template.jinja`, or the processor's
    `chat_template.json` (SmolDocling keeps it there)."""
    if tokenizer.chat_template:
        return str(tokenizer.chat_template)
    if (root / "chat_template.jinja").is_file():
        return (root / "chat_template.jinja").read_text()
    if (root / "chat_template.json").is_file():
        return str(json.loads((root / "chat_template.json").read_text())["chat_template"])
    raise ValueError(f"{root}: no chat template (chat_template.jinja or chat_template.json): Idefics3's prompt "
                     "is its chat template's")


class Idefics3Images(ImagePreprocessor):
    """A page is its tiles `[tiles, C, S, S]` (Idefics3ImageProcessor's); admission counts a page at
    the processor's most tiles (`image_tokens`, set by Idefics3Inputs)."""

    def __init__(self, processor: Any, image_seq_len: int):
        tile = int(processor.max_image_size["longest_edge"])
        most = min(int(processor.size["longest_edge"]), 4096) if processor.do_resize else 4096
        side = math.ceil(most / tile) if processor.do_image_splitting else 0
        self.max_tiles = side * side + 1 if side > 1 else 1
        super().__init__(processor, most, self.max_tiles * (image_seq_len + 2) + side + 1)
        self.prompt_tokens = 0
        self.image_seq_len = image_seq_len

    def check_size(self, width: int, height: int, field: str) -> None:
        """Every page is accepted: the processor resizes its longest edge to `size.longest_edge`
        (at most transformers' 4096), so no page makes more than `max_tiles` tiles."""

    def encode_images(self, values: Sequence[Any], fields: Sequence[str], limits,
                      sizes: list[tuple[int, int]] | None = None) -> list[np.ndarray]:
        return prepare_images(self.processor, values, fields, limits, lambda out: out["pixel_values"][0],
                              sizes=sizes, check_size=self.check_size)

    def encode_images_sized(self, values: Sequence[Any], fields: Sequence[str],
                            limits) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        sizes: list[tuple[int, int]] = []
        pixels = self.encode_images(values, fields, limits, sizes)
        return pixels, [(width, height) for height, width in sizes]

    def positions(self, pixels: np.ndarray) -> int:
        return int(pixels.shape[0]) * (self.image_seq_len + 2) + self.prompt_tokens


class Idefics3Inputs(VocabularyLookup):
    """The checkpoint's tokenizer (transformers', for the chat template and for decoding answers) and,
    as `images`, its image processor."""

    images: Idefics3Images

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        from transformers import AutoTokenizer

        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        root = Path(layout.root)
        self.hf = AutoTokenizer.from_pretrained(str(root), trust_remote_code=trust_remote_code)
        self.chat_template = read_chat_template(root, self.hf)
        self._tok = self.hf.backend_tokenizer
        self.special_ids = frozenset(self.hf.all_special_ids)
        config = Idefics3Config.from_hf(layout.config)
        self.image_token_id = self.token_id(IMAGE_TOKEN)
        if self.image_token_id != config.image_token_id:
            raise ValueError(f"{root}: the tokenizer's {IMAGE_TOKEN} is not config.json's image_token_id")
        for token in (FAKE_TOKEN, GLOBAL_TAG, "<row_1_col_1>"):
            self.token_id(token)  # the processor's markers: a tokenizer without them cannot write a page
        processor = load_idefics3_image_processor(root)
        if int(processor.max_image_size["longest_edge"]) != config.vision.image_size:
            raise ValueError(f"{root}: the processor's tiles are {processor.max_image_size['longest_edge']} pixels; "
                             f"the vision tower's image_size is {config.vision.image_size}")
        self.images = Idefics3Images(processor, config.image_seq_len)
        self.images.prompt_tokens = len(self.prompt_ids(DOCLING_PROMPT)) - 1
        self.images.image_tokens += self.images.prompt_tokens

    def prompt_ids(self, prompt: str) -> list[int]:
        """The chat template's prompt of one page and the text, its `<image>` once."""
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = self.hf.apply_chat_template(messages, chat_template=self.chat_template, tokenize=False,
                                           add_generation_prompt=True)
        ids = list(self.hf(text, add_special_tokens=False)["input_ids"])
        if ids.count(self.image_token_id) != 1:
            raise ValueError(f"the chat template wrote {ids.count(self.image_token_id)} {IMAGE_TOKEN} placeholders "
                             "for one page")
        return ids


class Idefics3Generation(GenerationHead):
    takes_prompt = False  # the card's prompt (docling's)

    def __init__(self, model: Idefics3Model, inputs: Idefics3Inputs, root: Path, options: Mapping[str, Any],
                 card_id: str, dtype: torch.dtype):
        super().__init__()
        self.hold(model)
        self.tokenizer = inputs.hf
        self.processor = inputs.images.processor
        self._image_ids: dict[tuple[int, int], tuple[int, ...]] = {}
        _, self.max_new_tokens, overrides = generate_options(options, card_id)
        self.generation = {**generation_config(root), **overrides}
        self.default = GenerationSettings.from_generation_config(self.generation, max_new_tokens=self.max_new_tokens)
        self.stop = frozenset(self.default.eos_token_ids) | ({self.default.pad_token_id} - {None})
        self.element_size = torch.empty((), dtype=dtype).element_size()
        most = inputs.images.image_tokens + self.max_new_tokens  # a page at its most tiles, and its answer
        if most > model.decoder_positions:
            raise ValueError(f"card {card_id}: a page of {inputs.images.max_tiles} tiles ({inputs.images.image_tokens} "
                             f"prompt tokens) plus options.generate.max_new_tokens {self.max_new_tokens} exceed the "
                             f"decoder's {model.decoder_positions} positions")

    def settings(self, max_new_tokens: int) -> GenerationSettings:
        return self.default.with_overrides(max_new_tokens=max_new_tokens)

    def image_ids(self, rows: int, columns: int) -> tuple[int, ...]:
        """The token ids of one page's `<image>` expansion (rows x columns tiles), tokenised once per grid."""
        ids = self._image_ids.get((rows, columns))
        if ids is None:
            model: Idefics3Model = self.model  # type: ignore[assignment]
            text = image_text(rows, columns, model.config.image_seq_len)
            ids = self._image_ids[rows, columns] = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids

    def page_prompt(self, prompt: Sequence[int], pixels: np.ndarray, size: tuple[int, int] | None) -> list[int]:
        """The prompt with its `<image>` expanded for the page's tiles."""
        if size is None:
            raise ValueError("an Idefics3 page needs its size: its grid of tiles follows from it")
        rows, columns = tile_grid(self.processor, *size)
        if (rows * columns + 1 if rows else 1) != pixels.shape[0]:
            raise ValueError(f"the processor made {pixels.shape[0]} tiles of a {size[0]} x {size[1]} page; its grid "
                             f"is {rows} x {columns}")
        model: Idefics3Model = self.model  # type: ignore[assignment]
        at = list(prompt).index(model.config.image_token_id)
        return [*prompt[:at], *self.image_ids(rows, columns), *prompt[at + 1:]]

    def requests(self, jobs: Sequence[Job], device: torch.device, dtype: torch.dtype) -> list[GenerationRequest]:
        """The pages' tiles through the vision tower in one batch, each page's features in its
        prompt's embeddings (positions 0, 1, ...: plain RoPE)."""
        model: Idefics3Model = self.model  # type: ignore[assignment]
        pixels = [job.pixels for job in jobs if job.pixels is not None]
        prompts = [self.page_prompt(job.prompt, p, job.size) for job, p in zip(jobs, pixels, strict=True)]
        tiles = torch.from_numpy(np.concatenate(pixels)).to(device, dtype)
        features = model.encode_tiles(tiles).split([int(p.shape[0]) for p in pixels])
        requests = []
        for job, ids, page in zip(jobs, prompts, features, strict=True):
            embeddings = model.prompt_embeddings(torch.tensor(ids, device=device), page.flatten(0, 1))
            requests.append(GenerationRequest(None, ids, job.settings, prompt_embeddings=embeddings))
        return requests

    def answer(self, prompt: list[int], generated: list[int], task: str | None,
               size: tuple[int, int] | None) -> Answer:
        tokens = generated[:-1] if generated and generated[-1] in self.stop else generated
        return Answer(self.tokenizer.decode(tokens, skip_special_tokens=False).lstrip())


def build_generation_head(ctx: HeadContext) -> dict[str, GenerationHead]:
    if not isinstance(ctx.tokenizer, Idefics3Inputs):
        raise TypeError(f"{ctx.card.id}: the Idefics3 family prepares its inputs with Idefics3Inputs")
    head = Idefics3Generation(ctx.backbone, ctx.tokenizer, Path(ctx.root), ctx.options("generate"),  # type: ignore[arg-type]
                              ctx.card.id, ctx.dtype)
    return {"generate": head}


# new tokens a page of a card-less directory may ask for (the built-in cards' bound), within its positions
LOCAL_MAX_NEW_TOKENS = 4096


def local_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A card-less directory: docling's full-page conversion prompt."""
    from ...card import ModelCard, WeightsSource

    positions = Idefics3Config.from_hf(config).max_seq_len
    size = (read_image_processor_config(Path(root)).get("size") or {}).get("longest_edge") or 4 * 364
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="idefics3", outputs=("generate",),
                     modalities=("image",), query_tower="image", image_size=int(size), max_seq_len=positions,
                     max_batch_tokens=positions, pooling="none", normalize=False,
                     options={"generate": {"task_prompt": DOCLING_PROMPT,
                                           "max_new_tokens": min(LOCAL_MAX_NEW_TOKENS, positions // 2)}},
                     description=f"Idefics3 from {root} (DocTags of each page: {DOCLING_PROMPT!r})")
