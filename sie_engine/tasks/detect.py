"""Open-vocabulary object detection (OWLv2, Grounding DINO): the `extract` task's mode for a card
whose outputs include `detect` (tasks/extract.py picks it). A family that reads the labels as one
prompt (Grounding DINO) is run by tasks/grounded_detect.py; this module runs the others (OWLv2):

The labels run first, through the text tower (`queries` work, batched like any text), each into
one query embedding; then every image, decoded and preprocessed on the image threads (padded to
a square and resized, as OWLv2's processor does), runs through the vision tower with its
request's queries, threshold and size riding on its work item (`detect` work, batched by vision
positions with other requests' images). The head answers each image's boxes above the threshold
in its own pixels (models/owlv2/postprocess.py: transformers' post-processing).
"""

from __future__ import annotations

import numpy as np

from sie_contract.values import Region

from .. import validation as v
from ..errors import InvalidRequest
from ..models.owlv2.head import DetectionWork
from ..types import ExtractedItem, ExtractResult
from ..work import WorkItem
from . import grounded_detect
from .common import check_labels, longest_first
from .context import Call, TaskContext
from .extract import ExtractMode
from .image_work import submit_images

QUERIES = frozenset({"queries"})
DETECT = frozenset({"detect"})
# transformers' default for `post_process_grounded_object_detection`
DEFAULT_THRESHOLD = 0.1
NO_IDS: np.ndarray = np.zeros(0, dtype=np.int32)


# families whose labels are read together as one text prompt, fused with the image in the encoder
PROMPTED_FAMILIES = frozenset({"grounding-dino"})


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    if card.family in PROMPTED_FAMILIES:
        return await grounded_detect.run(engine, call, MODE.described(card.id))
    if "text_threshold" in fields:  # its labels are its own: no prompt tokens to threshold
        raise InvalidRequest(f"text_threshold does not apply: {MODE.described(card.id)} and labels each box with one "
                             "of them; text_threshold is Grounding DINO's (its labels come from the prompt's tokens)",
                             field="text_threshold")
    ids, texts, images = v.parse_encode_items(fields["items"], engine.limits)
    for i, text in enumerate(texts):
        if text is not None:
            raise InvalidRequest(f"items[{i}] is a text, but {MODE.described(card.id)}: send each image as "
                                 "{\"image\": <base64 or bytes>}", field=f"items[{i}]")
    labels = check_labels(fields["labels"], engine.limits)
    threshold = float(fields.get("threshold", DEFAULT_THRESHOLD))

    tokenized, tokenize_s = await engine.tokenize(card, "encode", labels)
    for i, truncated in enumerate(tokenized.truncated):
        if truncated:  # transformers' processor does not truncate either: its model cannot take the label
            raise InvalidRequest(f"labels[{i}] is longer than the model's text window ({card.max_seq_len} tokens); "
                                 "shorten it", field=f"labels[{i}]")
    label_request = engine.new_request(call, "extract", len(labels))
    encoded = await engine.run_items(card, "extract", [
        WorkItem(label_request, i, tokenized.ids[i], outputs=QUERIES) for i in longest_first(tokenized.ids)
    ], label_request)
    queries = np.stack([e["queries"] for e in encoded])  # [Q, D]

    request = engine.new_request(call, "extract", len(ids))
    paths = [f"items[{i}].image" for i in range(len(ids))]
    image_tokens, image_s = await submit_images(engine, card, request, images, paths, DETECT,
                                                lambda size: DetectionWork(queries, threshold, size))
    found = [r["detect"] for r in await request.future]
    items = [ExtractedItem(id=item_id, entities=[], regions=[
        Region(label=labels[int(k)], score=float(s), box=[float(x) for x in box])
        for s, k, box in zip(d.scores, d.labels, d.boxes)]) for item_id, d in zip(ids, found)]
    return ExtractResult(card.id, items, tokenized.num_tokens + image_tokens,
                         engine.timings(request, call.started, tokenize_s + image_s))


MODE = ExtractMode(
    kind="an open-vocabulary detector", family="open-vocabulary detector", labels="objects to find",
    fields=frozenset({"threshold", "text_threshold"}), answers=frozenset({"regions"}), run=run,
    example="google/owlv2-base-patch16-ensemble", takes_images=True,
)
