"""The shapes that cross the wire, declared once as typed structures (msgspec).

Each request field of a built-in task names one of these types (`builtin.py`); from them
come the server's decoding (JSON and msgpack straight into a validated struct, the first
wrong element refused with its path: `items[3].text`), the Python call's validation
(`Task.request`), the JSON Schema of the OpenAPI document and the typed client's fields.

What the structs check is what holds for every deployment: types, unknown fields, enums,
fixed bounds (an id's 512 characters, a threshold in [0, 1], at most 16384 dims). The
bounds a deployment configures (`sie_engine.validation.Limits`: items per request,
characters per text, labels) and those that depend on the model (its width, its window)
are checked by the engine right after decoding, before any work.

A `null` field is the field not sent (as today's clients expect), so every field is
optional here and the task's required fields are checked after decoding (`Task.request`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta, Struct

# "muvera": a fixed-dimensional encoding of the multivector output (models with one), see `Muvera`
OutputType = Literal["dense", "sparse", "multivector", "muvera"]
OutputDtype = Literal["float32", "float16", "int8", "uint8", "binary"]
Precision = Literal["float32", "float16", "bfloat16", "int8"]

OUTPUT_TYPES: tuple[str, ...] = get_args(OutputType)
OUTPUT_DTYPES: tuple[str, ...] = get_args(OutputDtype)
PRECISIONS: tuple[str, ...] = get_args(Precision)

# A text to run a model on. An empty or blank one is a text like any other (#29.2): the reference
# libraries take it (sentence-transformers embeds `''` as its special tokens only, a cross-encoder
# scores it), and one blank field must not lose a 10,000-document batch. Its length limit is the
# deployment's (`validation.check_text`).
Text = str
# An item's id: a string (an integer is taken and written back as its decimal string).
MAX_ID_CHARS = 512
ItemId = Annotated[str, Meta(max_length=MAX_ID_CHARS)] | int
Score = Annotated[float, Meta(ge=0, le=1)]
PositiveInt = Annotated[int, Meta(ge=1)]
MAX_DIMS = 1 << 14  # wider than any embedding SIE serves (Qwen3-Embedding-8B: 4096)
Dims = Annotated[int, Meta(ge=1, le=MAX_DIMS)]
# Ceilings on a request's lists, far above what a deployment allows (`Limits`: 4,096 items, 64
# labels by default): in msgpack a list states its length first, so the decoder refuses a longer
# one before building a single element (16 MiB of one-byte values were +1.1 GB, issue #30.3).
# A deployment's own bound is checked right after decoding (413).
MAX_WIRE_ITEMS = 1 << 16
MAX_WIRE_LABELS = 1 << 12
Label = Annotated[str, Meta(min_length=1, pattern=r"\S")]  # few and short: the pattern costs nothing
Labels = Annotated[list[Label], Meta(min_length=1, max_length=MAX_WIRE_LABELS)]
# An image item's file bytes: msgpack carries them as bin, JSON as base64 or a data: URI. msgspec
# cannot type "bytes or str" (both are str-like to it), so the value is typed in `__post_init__`.
_IMAGE_SCHEMA = {
    "type": "string", "format": "byte",
    "description": "the image file's bytes (PNG, JPEG, WebP, GIF, BMP): base64 or a data: URI in JSON, "
                   "raw bytes in msgpack; URLs are not fetched"}
Image = Annotated[Any, Meta(extra_json_schema=_IMAGE_SCHEMA)]
# A document item's file bytes (PDF), carried as an image's are. Its pages are rendered server-side,
# each one image input; the deployment bounds its bytes, pages and pixels (`Limits.max_document_*`).
_DOCUMENT_SCHEMA = {
    "type": "string", "format": "byte",
    "description": "the PDF file's bytes: base64 or a data:application/pdf;base64, URI in JSON, raw bytes in "
                   "msgpack; rendered server-side, one image input per page; links and file references are "
                   "never followed"}
Document = Annotated[Any, Meta(extra_json_schema=_DOCUMENT_SCHEMA)]
# A video item's file bytes (MP4, WebM, MKV, AVI, MOV: what FFmpeg demuxes), carried as an image's are.
# Its frames are sampled and timed server-side for a model that reads video (Qwen3-VL-Embedding and
# -Reranker).
_VIDEO_SCHEMA = {
    "type": "string", "format": "byte",
    "description": "the video file's bytes: base64 or a data:video/mp4;base64, URI in JSON, raw bytes in msgpack; "
                   "its frames are sampled server-side (one a second, at most 64, as Qwen3-VL-Embedding's "
                   "and Qwen3-VL-Reranker's scripts do); URLs are not fetched"}
Video = Annotated[Any, Meta(extra_json_schema=_VIDEO_SCHEMA)]
# Fixed bounds of a document's options: what no deployment would raise (its own bounds are Limits').
MIN_DPI, MAX_DPI, DEFAULT_DPI = 18, 600, 144
Dpi = Annotated[int, Meta(ge=MIN_DPI, le=MAX_DPI, description="render resolution in dots per inch "
                                                              f"(default {DEFAULT_DPI})")]
PageNumber = Annotated[int, Meta(ge=1)]
PageNumbers = Annotated[list[PageNumber], Meta(min_length=1, max_length=MAX_WIRE_ITEMS,
                                               description="1-based page numbers to render, in the order "
                                                           "given (default: every page)")]
# ranges as a printing dialog takes them: "1-3,7,10-" (10- runs to the last page)
PAGE_RANGES = r"^\s*\d+\s*(-\s*\d*\s*)?(,\s*\d+\s*(-\s*\d*\s*)?)*$"
PageRanges = Annotated[str, Meta(pattern=PAGE_RANGES, max_length=1024,
                                 description="1-based page ranges to render, e.g. \"1-3,7,10-\" (\"10-\": to the "
                                             "last page)")]
# Vectors in an answer: JSON lists (numpy arrays written by orjson) or msgpack tensor objects.
Tensor = Annotated[Any, Meta(extra_json_schema={"$ref": "#/components/schemas/Tensor"})]


class Refusal(ValueError):
    """Raised in a struct's `__post_init__`: `field` is the offending member (appended to the
    struct's path in the error), the message says what to send instead."""

    def __init__(self, field: str, message: str):
        super().__init__(f"@{field}: {message}")


class _Shape(Struct, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """Objects of the wire: unknown fields are refused, fields left at their default
    (None: not sent) are left out when the struct is turned back into plain values."""


# ---- requests --------------------------------------------------------------
class TextItem(_Shape):
    """`{id?, text}`; a plain string stands for `{text}`."""

    text: Text
    id: ItemId | None = None


class EncodeItem(_Shape):
    """`{id?, text}`, `{id?, image}` or `{id?, document, pages?, dpi?}` (image models only): one of
    text, image and document, or `{id?, image, text}` for a model that reads an image with its text
    in one prompt (Qwen3-VL-Embedding; other models refuse it). A document answers one item per
    page rendered (`PageOut`). `{id?, video}` (and `{id?, video, text}`) for a model that reads
    video (Qwen3-VL-Embedding)."""

    text: Text | None = None
    image: Image = None
    document: Document = None
    video: Video = None
    pages: PageNumbers | PageRanges | None = None
    dpi: Dpi | None = None
    id: ItemId | None = None

    def __post_init__(self) -> None:
        _check_one_input(self, image_text=True)


def _check_one_input(item: EncodeItem | ExtractItem, image_text: bool = False) -> None:
    """An item carries one of text, image and document (with `image_text`, a text may come with its
    image, and an encode item may be a video, with its text); pages and dpi only with a document."""
    inputs = ("text", "image", "document", "video") if image_text else ("text", "image", "document")
    sent = [name for name in inputs if getattr(item, name) is not None]
    if len(sent) > 1 and not (image_text and sent in (["text", "image"], ["text", "video"])):
        raise Refusal("", f"has both {sent[0]} and {sent[1]}; an item carries one of {', '.join(inputs[:-1])} and "
                      f"{inputs[-1]}" + (" (or an image or video and its text)" if image_text else ""))
    if item.document is None and (item.pages is not None or item.dpi is not None):
        raise Refusal("pages" if item.pages is not None else "dpi", "applies to a document item only")
    for name in inputs[1:]:
        value = getattr(item, name)
        if value is not None and not isinstance(value, (str, bytes, bytearray)):
            raise Refusal(name, f"must be bytes (msgpack) or a base64 string (JSON), got {type(value).__name__}")
    if not sent:
        raise Refusal("text", "is required (or, for an image model, image or document)")


# MUVERA's bounds: 2**k_sim partitions per repetition; the encoding has r_reps * 2**k_sim * dim_proj
# components, at most MAX_MUVERA_DIMS (Qdrant's widest vector; FastEmbed's defaults give 10,240), and
# r_reps * 2**k_sim partition sums of the token width are held while an item is encoded (FastEmbed's
# defaults: 640; upstream SIE's ColBERT cards: 1,280).
MAX_MUVERA_K_SIM = 10
MAX_MUVERA_REPS = 64
MAX_MUVERA_PARTITIONS = 1 << 13
MAX_MUVERA_DIMS = 1 << 16


class Muvera(_Shape):
    """The parameters of the `muvera` output, named and defaulted as FastEmbed's `Muvera`
    (fastembed.postprocess.muvera): the same parameters and seed give the same vectors."""

    k_sim: Annotated[int, Meta(ge=1, le=MAX_MUVERA_K_SIM)] = 5  # SimHash hyperplanes: 2**k_sim partitions
    dim_proj: Annotated[int, Meta(ge=1, le=MAX_DIMS)] = 16  # each partition's projected width (<= the token width)
    r_reps: Annotated[int, Meta(ge=1, le=MAX_MUVERA_REPS)] = 20  # independent repetitions, concatenated
    random_seed: Annotated[int, Meta(ge=0, le=2**63 - 1)] = 42

    def __post_init__(self) -> None:
        partitions = self.r_reps * 2 ** self.k_sim
        if partitions > MAX_MUVERA_PARTITIONS:
            raise Refusal("", f"has {partitions} partitions (r_reps * 2**k_sim); at most {MAX_MUVERA_PARTITIONS}: "
                              "lower r_reps or k_sim")
        size = partitions * self.dim_proj
        if size > MAX_MUVERA_DIMS:
            raise Refusal("", f"gives {size} dimensions (r_reps * 2**k_sim * dim_proj); at most {MAX_MUVERA_DIMS}: "
                              "lower r_reps, k_sim or dim_proj")

    @property
    def dims(self) -> int:
        return int(self.r_reps * 2 ** self.k_sim * self.dim_proj)


class EntitySpan(_Shape):
    """An entity a relation model's item carries: character offsets into its text (end
    exclusive) and its type; `text` and `score` may come too (a GLiNER answer sent back)."""

    start: Annotated[int, Meta(ge=0)]
    end: Annotated[int, Meta(ge=1)]
    label: Label
    text: str | None = None
    score: float | None = None


class ExtractItem(_Shape):
    """`{id?, text}`; for a relation model `{id?, text, entities}`; for a document model (Donut) a page
    image `{id?, image}` or a PDF `{id?, document, pages?, dpi?}`, answered per page. One of text,
    image and document; which a model takes is the engine's to say (its card's modalities)."""

    text: Text | None = None
    id: ItemId | None = None
    entities: Annotated[list[EntitySpan], Meta(max_length=MAX_WIRE_LABELS)] | None = None
    image: Image = None
    document: Document = None
    pages: PageNumbers | PageRanges | None = None
    dpi: Dpi | None = None

    def __post_init__(self) -> None:
        _check_one_input(self)
        if self.entities is not None and self.text is None:
            raise Refusal("entities", "applies to a text item only (a relation model's {text, entities})")


class Query(_Shape):
    """`{text}`; for a vision-language reranker (Qwen3-VL-Reranker) also `{image}` or `{video}`, with or
    without a text: a query image or video, its text after it (other models refuse them)."""

    text: Text | None = None
    image: Image = None
    video: Video = None

    def __post_init__(self) -> None:
        if self.image is not None and self.video is not None:
            raise Refusal("", "has both image and video; send one of them (its text beside it)")
        if self.text is None and self.image is None and self.video is None:
            raise Refusal("text", "is required (a vision-language reranker also takes an image or a video)")


class Classify(_Shape):
    """GLiNER2: one classification task answered beside the entities."""

    task: str
    labels: Labels
    multi_label: bool | None = None


_JSON_KINDS = {ord("["): "array", ord("{"): "object", ord("t"): "bool", ord("f"): "bool"}
_GOT = re.compile(r"got `(?P<got>[^`]+)`")


def _image_value(raw: msgspec.Raw, field: str = "image") -> Any:
    """An image member as the wire sent it (`raw`: its JSON or msgpack bytes, not yet decoded)
    -> str, bytes or None. Refusal for any other value, without decoding it (a list of a million
    empty maps would otherwise be built first: issue #30.3)."""
    data = memoryview(raw)
    if len(data) > 1 and data[0] == 0x22:  # a JSON string (in msgpack `"` is the 1-byte integer 34)
        return msgspec.json.decode(raw, type=str)
    if len(data) <= 4 and data.tobytes() in (b"null", b"\xc0"):  # JSON's null, msgpack's nil
        return None
    if len(data) > 1 and data[0] in _JSON_KINDS:
        got = _JSON_KINDS[data[0]]
    else:
        try:
            return msgspec.msgpack.decode(raw, type=bytes)
        except msgspec.ValidationError as exc:
            found = _GOT.search(str(exc))
            got = found.group("got") if found else "something else"
            if got == "str":
                return msgspec.msgpack.decode(raw, type=str)
        except msgspec.DecodeError:
            got = "a number"  # a JSON number is not msgpack
    raise Refusal(field, f"must be bytes (msgpack) or a base64 string (JSON), got {got}")


class WireEncodeItem(EncodeItem):
    """EncodeItem as the server decodes it from a body: `image` is taken as its raw bytes and
    typed here (`_image_value`), so no other value is ever built. (The Python call's EncodeItem
    keeps `Any`: msgspec cannot convert bytes into a Raw.)"""

    image: Annotated[msgspec.Raw, Meta(extra_json_schema=_IMAGE_SCHEMA)] = None  # type: ignore[assignment]
    document: Annotated[msgspec.Raw, Meta(extra_json_schema=_DOCUMENT_SCHEMA)] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if isinstance(self.image, msgspec.Raw):
            self.image = _image_value(self.image)
        if isinstance(self.document, msgspec.Raw):
            self.document = _image_value(self.document, "document")
        super().__post_init__()


class WireQuery(Query):
    """Query as the server decodes it (the image taken raw, as WireEncodeItem's)."""

    image: Annotated[msgspec.Raw, Meta(extra_json_schema=_IMAGE_SCHEMA)] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if isinstance(self.image, msgspec.Raw):
            self.image = _image_value(self.image)
        super().__post_init__()


WireQueryText = Text | WireQuery


class WireExtractItem(ExtractItem):
    """ExtractItem as the server decodes it (image and document taken raw, as WireEncodeItem's)."""

    image: Annotated[msgspec.Raw, Meta(extra_json_schema=_IMAGE_SCHEMA)] = None  # type: ignore[assignment]
    document: Annotated[msgspec.Raw, Meta(extra_json_schema=_DOCUMENT_SCHEMA)] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if isinstance(self.image, msgspec.Raw):
            self.image = _image_value(self.image)
        if isinstance(self.document, msgspec.Raw):
            self.document = _image_value(self.document, "document")
        super().__post_init__()


Items = Annotated[list[Text | TextItem], Meta(min_length=1, max_length=MAX_WIRE_ITEMS)]
EncodeItems = Annotated[list[Text | EncodeItem], Meta(min_length=1, max_length=MAX_WIRE_ITEMS)]
WireEncodeItems = Annotated[list[Text | WireEncodeItem], Meta(min_length=1, max_length=MAX_WIRE_ITEMS)]
ExtractItems = Annotated[list[Text | ExtractItem], Meta(min_length=1, max_length=MAX_WIRE_ITEMS)]
WireExtractItems = Annotated[list[Text | WireExtractItem], Meta(min_length=1, max_length=MAX_WIRE_ITEMS)]
# A document model's prompt (DocVQA's question) and its generated tokens' bound (the card's is the most).
Prompt = Annotated[str, Meta(min_length=1, max_length=4096)]
# A task token of a model prompted by task (Florence-2's `<OCR>`, `<OD>`, ...).
TaskToken = Annotated[str, Meta(min_length=1, max_length=64)]
QueryText = Text | Query


# ---- answers ---------------------------------------------------------------
# The client reads answers into these (sie_client.wire), so an answer's unknown fields are
# ignored there (a newer server may add one); the document still lists exactly these.
class _Answer(Struct, omit_defaults=True, kw_only=True):
    """An object of an answer."""


class Usage(_Answer):
    tokens: int


class SparseOut(_Answer):
    indices: Tensor
    values: Tensor
    labels: list[str] | None = None


class PageOut(_Answer):
    """The page of a document item an encoded item is: `item` is the document's index in the
    request's items, `number` the page's (1-based); its size in points (1/72 inch, the page box
    as rotated for display) and in the pixels it was rendered to."""

    item: int
    number: int
    width: float
    height: float
    width_px: int
    height_px: int


class EncodedItemOut(_Answer):
    id: str
    dense: Tensor = None
    sparse: SparseOut | None = None
    multivector: Tensor = None
    muvera: Tensor = None
    page: PageOut | None = None  # a document's page (its id is the document's)


class ScoredOut(_Answer):
    id: str
    index: int
    score: float
    rank: int


class EntityOut(_Answer):
    text: str
    label: str
    start: int
    end: int
    score: float | None = None  # absent: an entity the request gave a relation model


class ClassificationOut(_Answer):
    label: str
    score: float


class RelationOut(_Answer):
    head: EntityOut
    relation: str
    tail: EntityOut
    score: float


class RegionOut(_Answer):
    """A region of an image item: its label (a detector's class or query label, a layout class),
    score, box `[x0, y0, x1, y1]` in the image's pixels and, where the model reads one, its text;
    Florence-2's OCR regions add their `quad_box` `[x1, y1, ..., x4, y4]`, its segmentations their
    `polygons` (each `[x1, y1, x2, y2, ...]`), the box then being their extent."""

    label: str
    box: list[float]
    score: float | None = None
    text: str | None = None
    quad_box: list[float] | None = None
    polygons: list[list[float]] | None = None


class ExtractedItemOut(_Answer):
    id: str
    entities: list[EntityOut] | None = None
    classifications: list[ClassificationOut] | None = None
    relations: list[RelationOut] | None = None
    # document models (Donut): the text as the model emits it, its parsed JSON (Donut's token2json;
    # RVL-CDIP's class as {"class": ...}), regions where the model gives boxes, and the page of a document
    text: str | None = None
    data: Any = None
    regions: list[RegionOut] | None = None
    page: PageOut | None = None  # a document's page (its id is the document's)


class EncodeAnswer(_Answer):
    model: str
    items: list[EncodedItemOut]
    usage: Usage


class ScoreAnswer(_Answer):
    model: str
    scores: list[ScoredOut]
    usage: Usage


class ExtractAnswer(_Answer):
    model: str
    items: list[ExtractedItemOut]
    usage: Usage


def plain(value: Any) -> Any:
    """A decoded struct (or list of them) -> plain values, as a JSON parser would have made
    them: objects as dicts without the members not sent; image bytes stay bytes."""
    return msgspec.to_builtins(value, builtin_types=(bytes, bytearray, memoryview))
