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

import numpy as np

from sie_contract.values import Region

from ..errors import InvalidRequest
from ..models.grounding_dino.head import PromptWork
from ..models.grounding_dino.prompt import merged_prompt, phrase_positions, phrases
from ..types import ExtractedItem, ExtractResult
from ..work import WorkItem
from .common import check_labels
from .context import Call, TaskContext
from .image_work import picture_items, read_pictures, submit_images

PROMPT = frozenset({"prompt"})
DETECT = frozenset({"detect"})
# transformers' defaults for GroundingDinoProcessor.post_process_grounded_object_detection
DEFAULT_BOX_THRESHOLD = 0.25
DEFAULT_TEXT_THRESHOLD = 0.25


def _labels(fields, engine: TaskContext) -> list[str]:
    labels = check_labels(fields["labels"], engine.limits)
    for i, label in enumerate(labels):
        if "." in label:  # the processor would read such labels as an already merged prompt
            raise InvalidRequest(f"labels[{i}] contains '.': Grounding DINO's prompt separates labels with '.'; "
                                 "send each object as its own label without it", field=f"labels[{i}]")
    return labels


async def run(engine: TaskContext, call: Call, described: str) -> ExtractResult:
    card, fields = call.card, call.fields
    parsed = picture_items(engine, fields["items"], described)
    labels = _labels(fields, engine)  # refused before any document page is rendered
    pictures = await read_pictures(engine, parsed)
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
    positions = phrase_positions(prompt_ids)

    request = engine.new_request(call, "extract", len(pictures.ids))
    image_tokens, image_s = await submit_images(
        engine, card, request, pictures.images, pictures.paths, DETECT,
        lambda size: PromptWork(prompt_ids, features, positions, spans, threshold, text_threshold, size))
    found = [r["detect"] for r in await request.future]
    names, decode_s = await engine.with_tokenizer(card, _decode, [d.tokens for d in found])
    items = [ExtractedItem(id=item_id, entities=[], regions=[
        Region(label=name, score=float(s), box=[float(x) for x in box])
        for s, box, name in zip(d.scores, d.boxes, box_names)], page=page)
        for item_id, d, box_names, page in zip(pictures.ids, found, names, pictures.pages, strict=True)]
    return ExtractResult(card.id, items, len(prompt_ids) + image_tokens,
                         engine.timings(request, call.started, tokenize_s + pictures.seconds + image_s + decode_s))


def _decode(inputs, tokens: list[list[list[int]]]) -> list[list[str]]:
    return [inputs.decode_labels(per_image) for per_image in tokens]
