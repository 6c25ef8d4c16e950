"""Florence-2's generated text to answers, as `Florence2Processor.post_process_generation` and its
`Florence2PostProcessor` (transformers 5.x) parse it: location tokens `<loc_0>`..`<loc_999>` are
bins of the image's width and height, a bin's centre in pixels; four make a box
`[x0, y0, x1, y1]`, eight a quad box (OCR), pairs a polygon. The arithmetic is transformers' torch
float32 arithmetic, truncated to ints, so pixels agree exactly.

`post_process_generation(text, task, image_size, config)` returns transformers' dict;
`regions(task, answer)` turns it into SIE's regions (label, box, and the quad box or polygons
where the task gives them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .tasks import POST_PROCESSING

BINS = (1000, 1000)

# The post_processor_config transformers' conversion script writes into Florence-2's
# processor_config.json, for a checkpoint saved without one (transformers itself would then refuse
# every task): the parse kinds, and the words phrase grounding never grounds.
DEFAULT_CONFIG: dict[str, Any] = {
    "ocr": {}, "pure_text": {}, "description_with_bboxes": {}, "description_with_polygons": {}, "polygons": {},
    "bboxes": {}, "description_with_bboxes_or_polygons": {},
    "phrase_grounding": {"banned_grounding_tokens": [
        "it", "I", "me", "mine", "you", "your", "yours", "he", "him", "his", "she", "her", "hers", "they", "them",
        "their", "theirs", "one", "oneself", "we", "us", "our", "ours", "its", "myself", "yourself", "himself",
        "herself", "itself", "ourselves", "yourselves", "themselves", "this", "that", "these", "those", "who",
        "whom", "whose", "which", "what", "all", "another", "any", "anybody", "anyone", "anything", "each",
        "everybody", "everyone", "everything", "few", "many", "nobody", "none", "several", "some", "somebody",
        "someone", "something", "each other", "one another", "the image", "image", "images", "the", "a", "an",
        "a group", "other objects", "lots", "a set"]},
}


def dequantize(locations: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bins `[N, 4]` (boxes) or `[N, 2]` (points) -> pixels (int), a bin's centre; size: (width, height)."""
    per_bin_w, per_bin_h = size[0] / BINS[0], size[1] / BINS[1]
    if locations.shape[-1] == 4:
        x0, y0, x1, y1 = locations.split(1, dim=-1)
        return torch.cat([(x0 + 0.5) * per_bin_w, (y0 + 0.5) * per_bin_h, (x1 + 0.5) * per_bin_w,
                          (y1 + 0.5) * per_bin_h], dim=-1).int()
    if locations.shape[-1] == 2:
        x, y = locations.split(1, dim=-1)
        return torch.cat([(x + 0.5) * per_bin_w, (y + 0.5) * per_bin_h], dim=-1).int()
    raise ValueError(f"Unsupported location shape: last dim must be 2 or 4, got {locations.shape[-1]}.")


def strip_specials(text: str) -> str:
    return text.replace("<s>", "").replace("</s>", "").replace("<pad>", "")


_strip = strip_specials


_TEXT_BEFORE_BOX = r"^\s*(.*?)(?=<od>|</od>|<box>|</box>|<bbox>|</bbox>|<loc_)"
_BOX = r"<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>"
_OCR = r"(.+?)<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>"


def parse_ocr(text: str, pattern: str | None, image_size: tuple[int, int],
              area_threshold: float = 0.0) -> list[dict[str, Any]]:
    text = _strip(text)
    width, height = image_size
    instances = []
    for content, *quad in re.findall(pattern or _OCR, text):
        box = dequantize(torch.tensor([int(i) for i in quad]).reshape(-1, 2), image_size).flatten().tolist()
        if area_threshold > 0:
            xs, ys = box[0::2], box[1::2]
            # transformers' shoelace sum stops one short of closing the quad; kept as it is
            area = 0.5 * abs(sum(xs[i] * ys[i + 1] - xs[i + 1] * ys[i] for i in range(4 - 1)))
            if area < (width * height) * area_threshold:
                continue
        instances.append({"quad_box": box, "text": content.strip()})
    return instances


def parse_phrase_grounding(text: str, image_size: tuple[int, int], banned: set[str]) -> list[dict[str, Any]]:
    text = _strip(text)
    instances = []
    for phrase_text in re.findall(r"([^<]+(?:<loc_\d+>){4,})", text):
        phrase_text = phrase_text.replace("<ground>", "", 1).replace("<obj>", "", 1)
        if not phrase_text:
            continue
        match = re.search(_TEXT_BEFORE_BOX, phrase_text)
        if not match:
            continue
        phrase = match.group().strip()
        if phrase in banned:
            continue
        boxes = list(re.finditer(_BOX, phrase_text))
        if not boxes:
            continue
        bins = [[int(m.group(j)) for j in range(1, 5)] for m in boxes]
        instances.append({"bbox": dequantize(torch.tensor(bins), image_size).tolist(),
                          "cat_name": phrase.encode("ascii", "ignore").decode("ascii")})
    return instances


def parse_description_with_bboxes(text: str, image_size: tuple[int, int],
                                  allow_empty_phrase: bool = False) -> list[dict[str, Any]]:
    text = _strip(text)
    pattern = r"(?:(?:<loc_\d+>){4,})" if allow_empty_phrase else r"([^<]+(?:<loc_\d+>){4,})"
    instances = []
    for phrase_text in re.findall(pattern, text):
        phrase_text = phrase_text.replace("<ground>", "", 1).replace("<obj>", "", 1)
        if not phrase_text and not allow_empty_phrase:
            continue
        match = re.search(_TEXT_BEFORE_BOX, phrase_text)
        if not match:
            continue
        phrase = match.group().strip()
        boxes = list(re.finditer(_BOX, phrase_text))
        if not boxes:
            continue
        bins = [[int(m.group(j)) for j in range(1, 5)] for m in boxes]
        phrase = phrase.encode("ascii", "ignore").decode("ascii")
        instances += [{"bbox": box, "cat_name": phrase} for box in dequantize(torch.tensor(bins), image_size).tolist()]
    return instances


def parse_description_with_polygons(text: str, image_size: tuple[int, int], allow_empty_phrase: bool = False,
                                    with_box_at_start: bool = False) -> list[dict[str, Any]]:
    text = _strip(text)
    sep, start, end = (re.escape(t) for t in ("<sep>", "<poly>", "</poly>"))
    if allow_empty_phrase:
        pattern = rf"(?:(?:<loc_\d+>|{sep}|{start}|{end}){{4,}})"
    else:
        pattern = rf"([^<]+(?:<loc_\d+>|{sep}|{start}|{end}){{4,}})"
    phrase_pattern = r"^\s*(.*?)(?=<od>|</od>|<box>|</box>|<bbox>|</bbox>|<loc_|<poly>)"
    instances = []
    for phrase_text in re.findall(pattern, text):
        stripped = re.sub(r"^<loc_\d+>", "", phrase_text, count=1)
        if not stripped and not allow_empty_phrase:
            continue
        match = re.search(phrase_pattern, stripped)
        if not match:
            continue
        phrase = match.group().strip()
        if "<poly>" in phrase_text and "</poly>" in phrase_text:
            polys = [m.group(1) for m in re.finditer(rf"{start}(.*?){end}", phrase_text)]
        else:
            polys = [phrase_text]
        for poly in polys:
            matches = list(re.finditer(rf"((?:<loc_\d+>)+)(?:{sep}|$)", poly))
            if not matches:
                continue
            bbox: list[int] = []
            polygons = []
            for m in matches:
                bins = [int(b.group(1)) for b in re.finditer(r"<loc_(\d+)>", m.group(1))]
                if with_box_at_start and not bbox:
                    if len(bins) > 4:
                        bbox, bins = bins[:4], bins[4:]
                    else:
                        bbox = [0, 0, 0, 0]
                if len(bins) % 2 == 1:
                    bins = bins[:-1]
                polygons.append(dequantize(torch.tensor(bins).reshape(-1, 2), image_size).flatten().tolist())
            instance: dict[str, Any] = {"cat_name": phrase, "polygons": polygons}
            if bbox:
                instance["bbox"] = dequantize(torch.tensor([bbox]), image_size)[0].tolist()
            instances.append(instance)
    return instances


def parse(kind: str, text: str, image_size: tuple[int, int], config: Mapping[str, Any]) -> Any:
    """`Florence2PostProcessor(text=..., parse_tasks=[kind])[kind]`; `config`: the processor's
    post_processor_config (a kind it does not list is refused, as transformers refuses it)."""
    if kind not in config:
        raise ValueError(f"Unsupported parse task: {kind}")
    options = config[kind] or {}
    if kind == "ocr":
        # transformers reads these two keys in capitals (its conversion script writes them in lower case)
        return parse_ocr(text, options.get("PATTERN"), image_size, options.get("AREA_THRESHOLD", 0.0))
    if kind == "phrase_grounding":
        banned = set(config.get("phrase_grounding", {}).get("banned_grounding_tokens", []))
        return parse_phrase_grounding(text, image_size, banned)
    if kind == "pure_text":
        return text
    if kind == "description_with_bboxes":
        return parse_description_with_bboxes(text, image_size)
    if kind == "description_with_polygons":
        return parse_description_with_polygons(text, image_size)
    if kind == "polygons":
        return parse_description_with_polygons(text, image_size, allow_empty_phrase=True)
    if kind == "bboxes":
        return parse_description_with_bboxes(text, image_size, allow_empty_phrase=True)
    if kind == "description_with_bboxes_or_polygons":
        if "<poly>" in text:
            return parse_description_with_polygons(text, image_size)
        return parse_description_with_bboxes(text, image_size)
    raise ValueError(f"task {kind} is not supported")


def post_process_generation(text: str, task: str, image_size: tuple[int, int], config: Mapping[str, Any]) -> Any:
    """The generated sequence decoded with its special tokens (`batch_decode(...,
    skip_special_tokens=False)`), the task token, the image's (width, height) -> transformers' answer
    for the task (the value under `{task: ...}`)."""
    kind = POST_PROCESSING.get(task, "pure_text")
    parsed = parse(kind, text, image_size, config)
    if kind == "pure_text":
        return parsed.replace("<s>", "").replace("</s>", "").strip()
    if kind in ("description_with_bboxes", "bboxes"):
        answer = {"bboxes": [i["bbox"] for i in parsed], "labels": [i["cat_name"] for i in parsed]}
        if parsed and "score" in parsed[0]:
            answer["scores"] = [i["score"] for i in parsed]
        return answer
    if kind == "ocr":
        return {"quad_boxes": [i["quad_box"] for i in parsed], "labels": [i["text"] for i in parsed]}
    if kind == "phrase_grounding":
        bboxes, labels = [], []
        for inst in parsed:
            for box in inst["bbox"]:
                bboxes.append(box)
                labels.append(inst["cat_name"])
        return {"bboxes": bboxes, "labels": labels}
    if kind in ("description_with_polygons", "polygons"):
        return {"polygons": [i["polygons"] for i in parsed], "labels": [i["cat_name"] for i in parsed]}
    if kind == "description_with_bboxes_or_polygons":
        answer = {"bboxes": [], "bboxes_labels": [], "polygons": [], "polygons_labels": []}
        for inst in parsed:
            if "polygons" in inst:
                answer["polygons"].append(inst["polygons"])
                answer["polygons_labels"].append(inst["cat_name"])
            else:
                answer["bboxes"].append(inst["bbox"])
                answer["bboxes_labels"].append(inst["cat_name"])
        return answer
    raise ValueError(f"Unknown post-processing type: {kind}")


@dataclass
class Region:
    """One region of an answer, in the image's pixels. `box` `[x0, y0, x1, y1]` always (for a quad box
    or polygons, their extent); `quad_box` `[x1, y1, ..., x4, y4]` for OCR; `polygons` (each
    `[x1, y1, x2, y2, ...]`) for segmentation; `text` the recognised text for OCR (also its label)."""

    label: str
    box: list[int]
    quad_box: list[int] | None = None
    polygons: list[list[int]] | None = None
    text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"label": self.label, "box": self.box}
        for key in ("quad_box", "polygons", "text"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def _extent(points: list[int]) -> list[int]:
    xs, ys = points[0::2], points[1::2]
    return [min(xs), min(ys), max(xs), max(ys)] if xs and ys else [0, 0, 0, 0]


def regions(task: str, answer: Any) -> list[Region]:
    """transformers' answer for `task` -> SIE's regions (none for a text task)."""
    kind = POST_PROCESSING.get(task, "pure_text")
    if kind == "pure_text":
        return []
    if kind == "ocr":
        return [Region(label, _extent(quad), quad_box=quad, text=label)
                for quad, label in zip(answer["quad_boxes"], answer["labels"], strict=True)]
    if kind in ("description_with_polygons", "polygons"):
        return [Region(label, _extent([p for poly in polys for p in poly]), polygons=polys)
                for polys, label in zip(answer["polygons"], answer["labels"], strict=True)]
    if kind == "description_with_bboxes_or_polygons":
        return ([Region(label, box) for box, label in zip(answer["bboxes"], answer["bboxes_labels"], strict=True)]
                + [Region(label, _extent([p for poly in polys for p in poly]), polygons=polys)
                   for polys, label in zip(answer["polygons"], answer["polygons_labels"], strict=True)])
    return [Region(label, box) for box, label in zip(answer["bboxes"], answer["labels"], strict=True)]
