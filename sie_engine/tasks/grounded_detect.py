"""Open-vocabulary detection from one prompt (Grounding DINO): the detect mode's run for a family
whose labels are read together as one text (tasks/detect.py hands it such cards). Items are
images or PDF documents; each page of a document is an item of its own (its answer says which
page, as a document model's do).

The labels become the prompt "a cat. a dog." (GroundingDinoProcessor's merge), tokenised once;
its phrases (models/grounding_dino/prompt.py) run through the text tower as `prompt` work, each
phrase a sequence of its own. Then every image, decoded and resized on the image threads (each
at its own size), runs through the Swin and the encoder-decoder with its request's prompt,
thresholds and size riding on its work item (`detect` work, batched with other requests' images).
The head answers each image's boxes above the threshold in its own pixels, and the task decodes
each box's label from the prompt tokens above the text threshold (transformers' post-processing:
a label is the prompt's words the box matched, which may join several of the request's labels).
"""

from __future__ import annotations

import asyncio

import numpy as np

from sie_contract.values import Region

from .. import validation as v
from ..documents import expand_documents
from ..errors import InvalidRequest
from ..image_pool import on_image_threads
from ..models.grounding_dino.head import PromptWork
from ..models.grounding_dino.prompt import merged_prompt, phrase_positions, phrases
from ..types import ExtractedItem, ExtractResult
from ..work import WorkItem
from .common import check_labels
from .context import Call, TaskContext

PROMPT = frozenset({"prompt"})
DETECT = frozenset({"detect"})
IMAGE_QUEUE = "extract:image"  # the detect mode's queue of images (tasks/detect.py)
IMAGE_CHUNK = 32
# transformers' defaults for GroundingDinoProcessor.post_process_grounded_object_detection
DEFAULT_BOX_THRESHOLD = 0.25
DEFAULT_TEXT_THRESHOLD = 0.25
NO_IDS: np.ndarray = np.zeros(0, dtype=np.int32)


def _labels(fields, engine: TaskContext) -> list[str]:
    labels = check_labels(fields["labels"], engine.limits)
    for i, label in enumerate(labels):
        if "." in label:  # the processor would read such labels as an already merged prompt
            raise InvalidRequest(f"labels[{i}] contains '.': Grounding DINO's prompt separates labels with '.'; "
                                 "send each object as its own label without it", field=f"labels[{i}]")
    return labels


async def run(engine: TaskContext, call: Call, described: str) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts, images = v.parse_encode_items(fields["items"], engine.limits)
    for i, text in enumerate(texts):
        if text is not None:
            raise InvalidRequest(f"items[{i}] is a text, but {described}: send each image as "
                                 "{\"image\": <base64 or bytes>} or {\"document\": <PDF>}", field=f"items[{i}]")
    labels = _labels(fields, engine)
    pages: list = [None] * len(ids)
    paths = [f"items[{i}].image" for i in range(len(ids))]
    prepare_s = 0.0
    if any(isinstance(image, v.DocumentItem) for image in images):
        expanded = await expand_documents(ids, texts, images, engine.limits)
        ids, images, pages, paths, prepare_s = (expanded.ids, expanded.images, expanded.pages, expanded.fields,
                                                expanded.seconds)
    threshold = float(fields.get("threshold", DEFAULT_BOX_THRESHOLD))
    text_threshold = float(fields.get("text_threshold", DEFAULT_TEXT_THRESHOLD))

    tokenized, tokenize_s = await engine.tokenize(card, "encode", [merged_prompt(labels)])
    if tokenized.truncated[0]:  # transformers cuts the prompt at max_text_len; its labels would vanish
        raise InvalidRequest(f"the labels make a prompt longer than the model's {card.max_seq_len} tokens "
                             f"(\"{merged_prompt(labels)[:80]}...\"); send fewer or shorter labels", field="labels")
    prompt_ids = tokenized.ids[0].astype(np.int64)
    spans = tuple(phrases(prompt_ids))
    prompt_request = engine.new_request(call, "extract", len(spans))
    encoded = await engine.run_items(card, "extract", [
        WorkItem(prompt_request, i, tokenized.ids[0][start:end], outputs=PROMPT) for i, (start, end) in enumerate(spans)
    ], prompt_request)
    features = np.concatenate([e["prompt"] for e in encoded])  # [T, d_model], the phrases in order
    prompt = (prompt_ids, features, phrase_positions(prompt_ids), spans, threshold, text_threshold)

    request = engine.new_request(call, "extract", len(ids))
    try:
        image_tokens, image_s = await _submit_images(engine, card, request, images, paths, prompt)
    except BaseException as exc:  # a bad image: the images already queued must not wait on it
        request.fail(exc if isinstance(exc, Exception) else asyncio.CancelledError())
        request.future.exception()  # raised below, not awaited: marked read so asyncio logs no traceback
        raise
    found = [r["detect"] for r in await request.future]
    names, decode_s = await engine.with_tokenizer(card, _decode, [d.tokens for d in found])
    items = [ExtractedItem(id=item_id, entities=[], regions=[
        Region(label=name, score=float(s), box=[float(x) for x in box])
        for s, box, name in zip(d.scores, d.boxes, box_names)], page=page)
        for item_id, d, box_names, page in zip(ids, found, names, pages, strict=True)]
    return ExtractResult(card.id, items, len(prompt_ids) + image_tokens,
                         engine.timings(request, call.started, tokenize_s + prepare_s + image_s + decode_s))


async def _submit_images(engine: TaskContext, card, request, images: list, paths: list[str],
                         prompt: tuple) -> tuple[int, float]:
    """Decode and preprocess the images on the image threads, chunk by chunk, and queue each chunk
    with its prompt; returns (encoder positions queued, seconds spent preparing)."""
    prompt_ids, features, positions, spans, threshold, text_threshold = prompt
    inputs, seconds = await engine.with_tokenizer(card, _itself)
    limits, tokens = engine.limits, 0
    for start in range(0, len(images), IMAGE_CHUNK):
        chunk = list(range(start, min(start + IMAGE_CHUNK, len(images))))
        (pixels, sizes), spent = await on_image_threads(
            inputs.images.encode_sized, [images[i] for i in chunk], [paths[i] for i in chunk], limits)
        seconds += spent
        counts = [inputs.images.positions(p) for p in pixels]
        tokens += sum(counts)
        engine.submit(card, IMAGE_QUEUE, [
            WorkItem(request, i, NO_IDS, outputs=DETECT, pixels=p, image_tokens=count,
                     extra=PromptWork(prompt_ids, features, positions, spans, threshold, text_threshold, size))
            for i, p, count, size in zip(chunk, pixels, counts, sizes)
        ], request)
    return tokens, seconds


def _itself(inputs):
    return inputs


def _decode(inputs, tokens: list[list[list[int]]]) -> list[list[str]]:
    return [inputs.decode_labels(per_image) for per_image in tokens]
