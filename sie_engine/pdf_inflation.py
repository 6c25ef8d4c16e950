"""A bound on what a PDF's compressed streams inflate to, checked before pdfium parses a page.

pdfium inflates a page's content streams (and fonts, forms, object streams) whole before it draws
them, without a cap: a 38 KB file whose content stream inflates to 20 MB of path operators took
3.5 s and 400 MB to render (measured 2026-12-02), and 20 MB of file could be 20 GB of operators.
Images are the exception: pdfium streams them through a scanline decoder sized to the output
(a 100 MB image renders within its page's pixels), so image streams are left out of the count,
unless a page's `/Contents` names them (a content stream that calls itself an image is parsed as
content all the same).

So every FlateDecode stream of the file (found by its `stream` keyword, its dictionary read back to
its `obj` header) is inflated here, layer by layer for a chain of Flate filters, each stopped as
soon as the document's budget is passed: the scan costs at most the budget of inflation. zlib
stops at the end of each deflate stream, whatever `/Length` or a planted `endstream` says.
Not counted: streams under other filters (LZW, RunLength: far lower ratios, bounded by the file's
byte limit), and an image-marked stream that a page names through an indirect array
(`/Contents 7 0 R` with object 7 an array): only a subprocess with memory and time limits would
bound pdfium against every construct.
"""

from __future__ import annotations

import re
import zlib

from .errors import PayloadTooLarge

_STREAM = re.compile(rb">>\s*stream\r?\n")
_OBJECT_HEADER = re.compile(rb"(\d+)\s+\d+\s+obj\b")
_FLATE = re.compile(rb"/(?:FlateDecode|Fl)(?![A-Za-z0-9])")
_IMAGE = re.compile(rb"/Subtype\s*/Image(?![A-Za-z0-9])")
# a page's content: `/Contents 4 0 R` or `/Contents [4 0 R 5 0 R]`
_CONTENTS = re.compile(rb"/Contents\s*(\[[^\]]{0,65536}\]|\d+\s+\d+\s+R)")
_REFERENCE = re.compile(rb"(\d+)\s+\d+\s+R")
# how far back a stream's dictionary may start (its DecodeParms, a font's widths...)
_DICT_WINDOW = 1 << 16


def check_inflation(data: bytes, budget: int, field: str) -> int:
    """Bytes the file's Flate streams other than images inflate to (at most `budget`);
    PayloadTooLarge, naming `field`, once they pass it."""
    remaining = budget
    contents = _content_objects(data)
    images: list[tuple[int | None, int, int]] = []  # image-marked streams: (object number, start, layers)
    for number, start, layers, is_image in _flate_streams(data):
        if is_image:
            images.append((number, start, layers))
            continue
        remaining, outputs = _inflate(data, start, layers, remaining, budget, field)
        for output in outputs:  # page dictionaries may sit in compressed object streams
            contents |= _content_objects(output)
    for number, start, layers in images:
        if number in contents:
            remaining, _ = _inflate(data, start, layers, remaining, budget, field)
    return budget - remaining


def _flate_streams(data: bytes):
    """(object number or None, offset of the stream's data, Flate layers, marked as an image) for
    each stream with at least one Flate filter."""
    for found in _STREAM.finditer(data):
        start = found.start()
        window = data[max(0, start - _DICT_WINDOW):start]
        headers = list(_OBJECT_HEADER.finditer(window))
        dictionary = window[headers[-1].end():] if headers else window
        layers = len(_FLATE.findall(dictionary))
        if layers:
            yield (int(headers[-1].group(1)) if headers else None), found.end(), layers, \
                bool(_IMAGE.search(dictionary))


def _content_objects(data: bytes) -> set[int | None]:
    """Object numbers that pages name as their content."""
    numbers: set[int | None] = set()
    for found in _CONTENTS.finditer(data):
        numbers.update(int(ref.group(1)) for ref in _REFERENCE.finditer(found.group(1)))
    return numbers


def _inflate(data: bytes, start: int, layers: int, remaining: int, budget: int,
             field: str) -> tuple[int, list[bytes]]:
    """Inflate the stream at `start` through its `layers` Flate filters, counting every layer's
    output against `remaining`; returns what remains and the outputs."""
    chunk: bytes | memoryview = memoryview(data)[start:]
    outputs = []
    for _ in range(layers):
        try:
            out = zlib.decompressobj().decompress(chunk, remaining + 1)
        except zlib.error:
            break  # pdfium stops where zlib does: what came before the error is counted
        remaining -= len(out)
        if remaining < 0:
            raise PayloadTooLarge(f"{field}: its compressed streams inflate to more than {budget} bytes "
                                  "(a compression bomb, or a document too large to render: split it)", field=field)
        outputs.append(out)
        chunk = out
    return remaining, outputs
