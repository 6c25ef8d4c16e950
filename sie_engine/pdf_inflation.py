"""A bound on what a PDF's compressed streams inflate to, checked before pdfium parses a page.

pdfium inflates a page's content streams (and fonts, forms, object streams) whole before it draws
them, without a cap: a 38 KB file whose content stream inflates to 20 MB of path operators took
3.5 s and 400 MB to render (measured 2026-12-02), and 20 MB of file could be 20 GB of operators.
Images are the exception: pdfium streams them through a scanline decoder sized to the output
(a 100 MB image renders within its page's pixels), so image streams are left out of the count.

So every FlateDecode stream of the file (found by its `stream` keyword, its dictionary read back to
its `obj` header) is inflated here, layer by layer for a chain of Flate filters, each stopped as
soon as the document's budget is passed: the scan costs at most the budget of inflation. zlib
stops at the end of each deflate stream, whatever `/Length` or a planted `endstream` says.
Streams under other filters (LZW, RunLength) are not counted: their ratios are far lower, and
the byte limit on the file bounds them.
"""

from __future__ import annotations

import re
import zlib

from .errors import PayloadTooLarge

_STREAM = re.compile(rb">>\s*stream\r?\n")
_OBJECT_HEADER = re.compile(rb"\d+\s+\d+\s+obj\b")
_FLATE = re.compile(rb"/(?:FlateDecode|Fl)(?![A-Za-z0-9])")
_IMAGE = re.compile(rb"/Subtype\s*/Image(?![A-Za-z0-9])")
# how far back a stream's dictionary may start (its DecodeParms, a font's widths...)
_DICT_WINDOW = 1 << 16


def check_inflation(data: bytes, budget: int, field: str) -> int:
    """Bytes the file's non-image Flate streams inflate to (at most `budget`); PayloadTooLarge,
    naming `field`, once they pass it."""
    remaining = budget
    for found in _STREAM.finditer(data):
        start = found.start()
        window = data[max(0, start - _DICT_WINDOW):start]
        headers = list(_OBJECT_HEADER.finditer(window))
        dictionary = window[headers[-1].end():] if headers else window
        layers = len(_FLATE.findall(dictionary))
        if not layers or _IMAGE.search(dictionary):
            continue
        chunk = memoryview(data)[found.end():]
        for _ in range(layers):
            inflater = zlib.decompressobj()
            try:
                out = inflater.decompress(chunk, remaining + 1)
            except zlib.error:
                break  # pdfium stops where zlib does: what came before the error is counted
            remaining -= len(out)
            if remaining < 0:
                raise PayloadTooLarge(f"{field}: its compressed streams inflate to more than {budget} bytes "
                                      "(a compression bomb, or a document too large to render: split it)", field=field)
            chunk = memoryview(out)
    return budget - remaining
