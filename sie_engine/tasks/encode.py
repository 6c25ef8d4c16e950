"""The `encode` task: texts -> dense, sparse and multi-vector outputs.

Texts get the card's template (query or document, with its instruction), are
tokenised (ColBERT models: with their markers and query expansion) and queued
as `encode` work whose items name the outputs wanted; the per-request options
(Matryoshka `dims`, normalisation, output dtype) are applied to the results. The
`muvera` output is computed here from the multivector head's (sie_engine.muvera), on a
worker thread: the model runs the multivector head once for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from sie_contract.shapes import Muvera
from sie_contract.values import Page

from .. import validation as v
from ..card import apply_template, template_parts
from ..documents import expand_documents
from ..errors import InvalidRequest
from ..heads.colbert import marked_encode_args, uses_markers
from ..image_pool import on_image_threads
from ..images import PictureSource
from ..layers.lora import LoRAAdapter
from ..muvera import MuveraEncoder, muvera_encoder
from ..postprocess import convert_dtype, truncate_and_normalize
from ..tokenizer import ImageTextInputs
from ..types import EncodedItem, EncodeResult
from ..work import WorkItem
from .common import check_truncation, longest_first
from .context import Call, TaskContext
from .late_chunking import check_late_chunking, late_chunked

# Texts tokenised per step of a large request: each chunk is queued as soon as it is
# tokenised, so inference starts while the rest is still being tokenised.
TOKENIZE_CHUNK = 2048


async def run(engine: TaskContext, call: Call) -> EncodeResult:
    card, request = call.card, call.fields
    ids, texts, images = v.parse_encode_items(request["items"], engine.limits, image_text=True, videos=True)
    image_positions = [i for i, image in enumerate(images) if image is not None]
    paired = [i for i in image_positions if texts[i] is not None]
    if image_positions and "image" not in card.modalities:
        first = image_positions[0]
        kind = item_kind(images[first])
        raise InvalidRequest(f"items[{first}] is {'an image' if kind == 'image' else 'a ' + kind}, but model "
                             f"{card.id!r} takes {' and '.join(card.modalities)} items only; use an image model "
                             f"(CLIP, SigLIP, ColPali{', Qwen3-VL-Embedding' if kind == 'video' else ''}) for {kind}s",
                             field=f"items[{first}].{kind}")
    refuse_videos(card, images, image_positions)
    if paired:  # an image with its text: only a model that writes both into one prompt takes it
        await _check_image_texts(engine, card, paired[0])
    outputs = v.check_output_types(request.get("output_types"), card)
    # the fields are of their declared types (the request struct checked them); what the deployment's
    # limits and the model bound is checked here
    is_query, normalize, truncate = request.get("is_query", False), request.get("normalize"), request.get("truncate")
    instruction = v.check_instruction(request.get("instruction"), engine.limits)
    output_dtype = request.get("output_dtype", "float32")
    dims = v.check_dims(request.get("dims"), card.dims, card)
    muvera = _muvera_options(request.get("muvera"), outputs)
    sparse_labels = request.get("sparse_labels", False)
    if sparse_labels and "sparse" not in outputs:
        raise InvalidRequest("sparse_labels names the tokens of sparse outputs: ask for output_types ['sparse'] too",
                             field="sparse_labels")
    late = request.get("late_chunking", False)
    if late:
        check_late_chunking(card, outputs)
    pages: list[Page | None] | None = None  # each item's page of a document (None: no documents sent)
    fields: list[str] | None = None
    prepare_s = 0.0
    # documents are planned (parsed, bounded) once the cheap checks passed; each page becomes an image item
    if any(isinstance(image, v.DocumentItem) for image in images):
        expanded = await expand_documents(ids, texts, images, engine.limits)
        ids, texts, images, pages, fields = expanded.ids, expanded.texts, expanded.images, expanded.pages, \
            expanded.fields
        prepare_s = expanded.seconds
        image_positions = [i for i, image in enumerate(images) if image is not None]
    text_positions = [i for i, text in enumerate(texts) if text is not None and images[i] is None]
    templated = [text for text, image in zip(texts, images) if text is not None and image is None]  # at text_positions
    template = card.template_for(is_query, instruction) if request.get("template", True) else None
    if template is not None:
        templated = apply_template(templated, *template)

    wanted = frozenset("multivector" if output == "muvera" else output for output in outputs)  # the heads run
    lora_id = request.get("lora_id")  # one of the card's adapters (the engine checked the name)
    # held until the answer is in: an adapter in use is never evicted
    adapter = await engine.acquire_adapter(card, lora_id) if lora_id is not None else None
    try:
        if late:  # the texts as one sequence, each pooled over its own tokens there
            chunks = [text for text in texts if text is not None]  # every item: a text model's items are texts
            work_request, raw, tokens, tokenize_s = await late_chunked(engine, call, chunks, template, is_query,
                                                                       adapter)
        else:
            work_request = engine.new_request(call, "encode", len(ids))
            tokens, tokenize_s = await _submit(engine, card, work_request, templated, text_positions, images,
                                               image_positions, wanted, fields, truncate, is_query, adapter,
                                               ImagePrompts(texts, template_wrap(template)),
                                               prompt_left_out(card, template))
            raw = await work_request.future
    finally:
        if adapter is not None:
            engine.release_adapter(card, adapter.name)
    tokenize_s += prepare_s
    normalize = card.normalize if normalize is None else normalize
    if muvera is None:
        items = assemble(ids, raw, outputs, dims, normalize, output_dtype)
    else:  # milliseconds per item: off the event loop
        items = await asyncio.get_running_loop().run_in_executor(
            None, lambda: assemble(ids, raw, outputs, dims, normalize, output_dtype, muvera, is_query))
    if pages is not None:
        for item, page in zip(items, pages):
            item.page = page
    if sparse_labels:
        vectors = [item.sparse for item in items if item.sparse is not None]  # every item's: sparse was asked for
        labels, seconds = await engine.tokenize(card, "tokens_of", [vector.indices for vector in vectors])
        tokenize_s += seconds
        for vector, vector_labels in zip(vectors, labels):
            vector.labels = vector_labels
    return EncodeResult(card.id, items, tokens, engine.timings(work_request, call.started, tokenize_s))


async def _submit(engine: TaskContext, card, work_request, templated: list[str], text_positions: list[int],
                  images: list, image_positions: list[int], wanted: frozenset, fields: list[str] | None,
                  truncate: bool | None, is_query: bool, adapter: LoRAAdapter | None,
                  prompts: ImagePrompts | None = None, unpooled_prompt: str | None = None) -> tuple[int, float]:
    """Queue the texts, then the images, of a request; returns (tokens, seconds spent preparing).
    `unpooled_prompt`: the texts' prompt, which the dense pooling leaves out (`prompt_left_out`).
    A failure fails the request's work (what was queued is dropped) and is raised."""
    try:
        tokens, tokenize_s = await _submit_texts(engine, card, work_request, templated, text_positions, wanted,
                                                 truncate, is_query, adapter, unpooled_prompt)
        if image_positions:
            image_tokens, seconds = await submit_images(engine, card, work_request, images, image_positions, wanted,
                                                        fields=fields, prompts=prompts)
            tokens, tokenize_s = tokens + image_tokens, tokenize_s + seconds
    except BaseException as exc:
        work_request.fail(exc if isinstance(exc, Exception) else asyncio.CancelledError())
        work_request.future.exception()  # raised here, not awaited: marked read so asyncio logs no traceback
        raise
    return tokens, tokenize_s


async def _submit_texts(engine: TaskContext, card, work_request, texts: list[str], positions: list[int],
                        wanted: frozenset, truncate: bool | None, is_query: bool,
                        adapter: LoRAAdapter | None = None, unpooled_prompt: str | None = None) -> tuple[int, float]:
    """Tokenise the texts chunk by chunk, queueing each chunk as soon as it is ready; returns
    (tokens, seconds spent tokenising). `positions`: each text's place among the request's items;
    `adapter`: the LoRA adapter their rows run with (None: the base model); `unpooled_prompt`: the
    prompt every text begins with that the dense pooling leaves out (its tokens counted once)."""
    if not texts:
        return 0, 0.0
    prompt_tokens, tokenize_s = (await engine.tokenize(card, "prompt_length", unpooled_prompt)
                                 if unpooled_prompt else (0, 0.0))
    if "multivector" in card.outputs and uses_markers(card):  # ColBERT: markers, query expansion
        method, kwargs = "encode_marked", marked_encode_args(card, is_query)
    else:
        method, kwargs = "encode", {}
    tokens = 0
    if len(texts) <= TOKENIZE_CHUNK:  # one chunk: awaited here, no task of its own to schedule
        first: asyncio.Future = asyncio.get_running_loop().create_future()
        first.set_result(await engine.tokenize(card, method, texts, **kwargs))
    else:
        first = asyncio.ensure_future(engine.tokenize(card, method, texts[:TOKENIZE_CHUNK], **kwargs))
    pending = first
    try:
        for start in range(0, len(texts), TOKENIZE_CHUNK):
            tokenized, seconds = await pending
            if start + TOKENIZE_CHUNK < len(texts):
                following = texts[start + TOKENIZE_CHUNK:start + 2 * TOKENIZE_CHUNK]
                pending = asyncio.ensure_future(engine.tokenize(card, method, following, **kwargs))
            tokenize_s += seconds
            tokens += tokenized.num_tokens
            check_truncation(tokenized, truncate, positions=positions[start:start + TOKENIZE_CHUNK])
            key_lens: Sequence[int | None] = tokenized.key_lens or [None] * len(tokenized.ids)
            engine.submit(card, "encode", [  # extra: whether the text is a query (inference-free sparse heads)
                WorkItem(work_request, positions[start + i], tokenized.ids[i], outputs=wanted, key_len=key_lens[i],
                         extra=is_query, adapter=adapter, prompt_tokens=prompt_tokens)
                for i in longest_first(tokenized.ids)
            ], work_request)
    finally:
        if not pending.done():
            pending.cancel()
    return tokens, tokenize_s


# Images decoded and preprocessed per step: each step's pixels are queued at once, so the vision
# tower starts while later images are still being decoded, and a large request never holds all
# of its decoded images (a 224 x 224 image is 600 KB of float32 pixels).
IMAGE_CHUNK = 32
NO_IDS: np.ndarray = np.zeros(0, dtype=np.int32)


def _unwrapped(contents: list[str]) -> list[str]:
    return contents


@dataclass(frozen=True)
class ImagePrompts:
    """What an image item's own prompt is written from, where the model gives image items one
    (`ImageTextInputs.image_prompted`): each item's text (None: an image alone, indexed by the item's
    place in the request) and `wrap`, the task's prompt around each item's content (the family's image
    placeholder and the text): encode's card templates, the score task's yes/no prompt."""

    texts: Sequence[str | None]
    wrap: Callable[[list[str]], list[str]] = _unwrapped
    # where items' prompts differ beyond their content (a reranker's image or video query beside each
    # document): the prompt of the item at a request position around its content, given the contents of
    # the item's other images or videos (None: an image), in place of `wrap`
    wrap_at: Callable[[int, str, tuple[str | None, ...]], str] | None = None

    def wrap_for(self, positions: Sequence[int],
                 others: Sequence[tuple[str | None, ...]]) -> Callable[[list[str]], list[str]]:
        """`wrap` for the items at `positions` (a chunk of the request's image items, in order), `others`
        each item's other members' contents."""
        wrap_at = self.wrap_at
        if wrap_at is None:
            return self.wrap
        return lambda contents: [wrap_at(p, c, o) for p, c, o in zip(positions, contents, others, strict=True)]


NO_PROMPTS = ImagePrompts((), _unwrapped)


def template_wrap(template: tuple[str, str | None] | None) -> Callable[[list[str]], list[str]]:
    """The card's template with its instruction around each content (None: the request's `template: false`)."""
    return _unwrapped if template is None else lambda contents: apply_template(contents, *template)


def refuse_videos(card, images: Sequence[Any], positions: Sequence[int]) -> None:
    """Refuse video items where the card declares no video modality."""
    videos = [i for i in positions if isinstance(images[i], v.VideoItem)]
    if videos and "video" not in card.modalities:
        raise InvalidRequest(f"items[{videos[0]}] is a video, but model {card.id!r} reads images only; send its "
                             "frames as image items, or use a model that reads video (Qwen3-VL-Embedding, "
                             "Qwen3-VL-Reranker)", field=f"items[{videos[0]}].video")


async def _check_image_texts(engine: TaskContext, card, position: int) -> None:
    """Refuse an item with both an image and a text unless the model writes both into one prompt."""
    takes, _ = await engine.with_tokenizer(card, _takes_image_texts)
    if not takes:
        raise InvalidRequest(f"items[{position}] has both text and image; model {card.id!r} takes one of them per "
                             "item (send them as two items)", field=f"items[{position}]")


def _takes_image_texts(inputs) -> bool:
    return isinstance(inputs, ImageTextInputs) and inputs.image_prompted


def item_kind(value: Any) -> str:
    """What an item of the images list is: an image, a document or a video."""
    return "document" if isinstance(value, v.DocumentItem) else "video" if isinstance(value, v.VideoItem) else "image"


async def submit_images(engine: TaskContext, card, work_request, images: list, positions: list[int],
                        wanted: frozenset, queue: str | None = None, extra: Any = None,
                        fields: Sequence[str | tuple[str, ...]] | None = None,
                        prompts: ImagePrompts | None = None) -> tuple[int, float]:
    """Decode, check and preprocess the image items on the tokenizer pool and queue them (apart from
    texts: the scheduler batches them by patches for the vision tower); returns (positions the vision
    tower runs, seconds spent preparing). `queue` and `extra`: the score task's (MaxSim against a query);
    `fields`: the path each item's refusal names (default `items[i].image`); `prompts`: what a model
    whose image items run inside prompts of their own writes them from (default: no texts, no template).
    An item of such a model may be a tuple of images (with a tuple of fields), in its prompt's order."""
    limits = engine.limits

    def prepare(inputs, values, fields, texts, chunk):
        if inputs.images is None:
            raise InvalidRequest(f"model {card.id!r} has no vision tower; it takes text items only", field="items")
        members = _decoded_once(inputs, values, fields, limits)
        pixels = [_item_pixels(value, decoded) for value, decoded in zip(values, members)]
        if isinstance(inputs, ImageTextInputs) and inputs.image_prompted:
            item_fields = [field if isinstance(field, str) else field[-1] for field in fields]
            contents = [[content for _, content in decoded] for decoded in members]
            wrap = (prompts or NO_PROMPTS).wrap_for(chunk, [tuple(own[1:]) for own in contents])
            prompt_ids, counts = inputs.image_prompts(texts, wrap, pixels, item_fields, [own[0] for own in contents])
            return prompt_ids, pixels, counts
        return [NO_IDS] * len(pixels), pixels, [inputs.images.positions(values) for values in pixels]

    tokens = 0
    # the model's input preparation (loaded on the tokenizer pool); its images go to threads of their own
    inputs, seconds = await engine.with_tokenizer(card, _itself)
    for start in range(0, len(positions), IMAGE_CHUNK):
        chunk = positions[start:start + IMAGE_CHUNK]
        (prompt_ids, pixels, counts), spent = await on_image_threads(
            prepare, inputs, [images[i] for i in chunk],
            [fields[i] if fields is not None else f"items[{i}].{item_kind(images[i])}" for i in chunk],
            [prompts.texts[i] if prompts is not None else None for i in chunk], chunk)
        seconds += spent
        tokens += sum(counts)
        ticket = work_request.reservation.decoding if work_request.reservation is not None else None
        if ticket is not None:  # its pixels are decoded: admission's backlog shrinks, the rate is measured
            ticket.decoded(len(chunk) / len(positions), spent,
                           measured=not any(isinstance(member, (PictureSource, v.VideoItem))
                                            for i in chunk for member in _members(images[i])))
        engine.submit(card, queue or IMAGE_QUEUE, [
            WorkItem(work_request, position, ids, outputs=wanted, pixels=values, image_tokens=count, extra=extra)
            for position, ids, values, count in zip(chunk, prompt_ids, pixels, counts)
        ], work_request)
    return tokens, seconds


def _members(item: Any) -> tuple:
    """The images and videos of an item: itself, or the tuple it is (a reranker's query beside a document)."""
    return item if isinstance(item, tuple) else (item,)


def _decoded_once(inputs, values: list, fields: list, limits) -> list[list[tuple[Any, str | None]]]:
    """Each distinct image and video of a chunk decoded once (a reranker's query stands beside every
    document), then given to every item that holds it: per item, per member, (its pixels, its prompt
    content): an image's array and None, a video's temporal patches and its content (timestamps and
    placeholders)."""
    flat = [(value, field) for item, where in zip(values, fields)
            for value, field in zip(_members(item), _members(where), strict=True)]
    first: dict[int, tuple[Any, str]] = {}
    for value, field in flat:
        first.setdefault(id(value), (value, field))
    stills = [(value, field) for value, field in first.values() if not isinstance(value, v.VideoItem)]
    decoded: dict[int, tuple[Any, str | None]] = {
        id(value): (pixels, None) for (value, _), pixels in
        zip(stills, inputs.images.encode_images([s[0] for s in stills], [s[1] for s in stills], limits))}
    for value, field in first.values():
        if isinstance(value, v.VideoItem):
            decoded[id(value)] = inputs.encode_video(value.data, field, limits)  # (grids, content)
    return [[decoded[id(member)] for member in _members(item)] for item in values]


def _item_pixels(item: Any, decoded: list[tuple[Any, str | None]]) -> Any:
    """What the vision tower runs for an item: an image's array, a video's tuple of temporal patches,
    or for a tuple of images and videos the tuple of all their arrays, in the prompt's order."""
    if not isinstance(item, tuple):
        return decoded[0][0]
    return tuple(array for pixels, _ in decoded for array in (pixels if isinstance(pixels, tuple) else (pixels,)))


def _itself(inputs):
    return inputs


# the scheduler's queue of image work: batches never mix the vision tower's inputs with texts
IMAGE_QUEUE = "encode:image"


def prompt_left_out(card, template: tuple[str, str | None] | None) -> str | None:
    """The template's prompt (before `{text}`, its instruction written in) where the card's dense
    pooling leaves it out (`options.dense.include_prompt: false`, sentence-transformers' Pooling
    option; GritLM's mean over the text alone); None where it pools every token."""
    if template is None or ((card.options or {}).get("dense") or {}).get("include_prompt", True):
        return None
    return template_parts(*template)[0] or None


def _muvera_options(value: Any, outputs: Sequence[str]) -> Muvera | None:
    """The `muvera` output's parameters (FastEmbed's defaults for those not sent); None when
    the output is not asked for. The request struct checked the values and their bounds."""
    if "muvera" not in outputs:
        if value is not None:
            raise InvalidRequest("muvera sets the parameters of the muvera output: ask for output_types ['muvera'] "
                                 "too", field="muvera")
        return None
    return value if isinstance(value, Muvera) else msgspec.convert(value or {}, Muvera)


def _muvera_encoder(options: Muvera, width: int) -> MuveraEncoder:
    try:
        return muvera_encoder(width, options.k_sim, options.dim_proj, options.r_reps, options.random_seed)
    except ValueError as exc:  # dim_proj wider than the model's token vectors
        raise InvalidRequest(f"muvera.{exc}", field="muvera.dim_proj") from None


def assemble(ids: list[str], raw: list[dict], outputs: Sequence[str], dims: int | None,
             normalize: bool, output_dtype: str, muvera: Muvera | None = None,
             is_query: bool = False) -> list[EncodedItem]:
    """Per-item head outputs -> EncodedItems with the request's output options."""
    none = [None] * len(ids)
    dense = sparse = multivector = encodings = none
    if "dense" in outputs:
        vectors = np.stack([r["dense"] for r in raw])
        if dims is not None and dims > vectors.shape[1]:  # a card without `dims` is checked here, on the real width
            raise InvalidRequest(f"dims must be between 1 and {vectors.shape[1]} for this model", field="dims")
        vectors = truncate_and_normalize(vectors, dims, normalize)
        dense = list(vectors) if output_dtype == "float32" else [convert_dtype(v, output_dtype) for v in vectors]
    if "sparse" in outputs:
        sparse = [r["sparse"] for r in raw]
    if "multivector" in outputs:
        multivector = [convert_dtype(r["multivector"], output_dtype) for r in raw]
    if muvera is not None:
        encoder = _muvera_encoder(muvera, raw[0]["multivector"].shape[-1])
        for i, r in enumerate(raw):
            if not len(r["multivector"]):
                raise InvalidRequest(f"items[{i}] has no token vectors to encode with MUVERA (every token was "
                                     "skipped)", field=f"items[{i}]")
        encodings = [convert_dtype(encoder.encode(r["multivector"], is_query), output_dtype) for r in raw]
    # one constructor call per item: a large request has thousands
    return [EncodedItem(*fields) for fields in zip(ids, dense, sparse, multivector, encodings)]
