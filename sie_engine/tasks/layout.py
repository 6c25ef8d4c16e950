"""Layout detection (PP-DocLayoutV3): the `extract` task's mode for a card whose outputs include
`layout` (tasks/extract.py picks it). Items are images or PDF documents; each page of a document is
an item of its own (its answer says which page, as a document model's do).

The model's classes are its own (config.json's id2label): like a fixed-label classifier it takes no
labels (extract refuses them). Every image, decoded and resized on the image threads to the
processor's fixed side, runs through the whole model as `layout` work (batched with other requests'
images); the head answers each image's regions scoring at least the threshold, in its own pixels
and in the model's reading order (models/pp_doclayout/postprocess.py: transformers' post-processing).
"""

from __future__ import annotations

from sie_contract.values import Region

from ..models.pp_doclayout.head import LayoutWork
from ..types import ExtractedItem, ExtractResult
from .context import Call, TaskContext
from .extract import ExtractMode
from .image_work import picture_items, read_pictures, submit_images

LAYOUT = frozenset({"layout"})
# transformers' default for PPDocLayoutV3ImageProcessor.post_process_object_detection
DEFAULT_THRESHOLD = 0.5


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    pictures = await read_pictures(engine, picture_items(engine, fields["items"], MODE.described(card.id)))
    threshold = float(fields.get("threshold", DEFAULT_THRESHOLD))
    names, _ = await engine.with_tokenizer(card, _class_names)
    request = engine.new_request(call, "extract", len(pictures.ids))
    tokens, image_s = await submit_images(engine, card, request, pictures.images, pictures.paths, LAYOUT,
                                          lambda size: LayoutWork(threshold, size))
    found = [r["layout"] for r in await request.future]
    items = [ExtractedItem(id=item_id, entities=[], regions=[
        Region(label=names[int(k)], score=float(s), box=[float(x) for x in box])
        for s, k, box in zip(d.scores, d.labels, d.boxes)], page=page)
        for item_id, d, page in zip(pictures.ids, found, pictures.pages, strict=True)]
    return ExtractResult(card.id, items, tokens,
                         engine.timings(request, call.started, pictures.seconds + image_s))


def _class_names(inputs) -> tuple[str, ...]:
    names: tuple[str, ...] = inputs.class_names
    return names


MODE = ExtractMode(
    kind="a layout model", family="layout", labels="(none)",
    fields=frozenset({"threshold"}), answers=frozenset({"regions"}), run=run,
    example="PaddlePaddle/PP-DocLayoutV3_safetensors", takes_labels=False,
    own_labels="its own region classes (config.json's id2label), in reading order", takes_images=True,
)
