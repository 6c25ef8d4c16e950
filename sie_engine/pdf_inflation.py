"""A bound on what a PDF's filtered streams decode to, checked before pdfium parses a page.

pdfium decodes a page's content streams (and fonts, forms, object streams) whole before it draws
them, without a cap: a 38 KB file whose content stream inflates to 20 MB of path operators took
3.5 s and 400 MB to render (measured 2026-12-02), and 20 MB of file could be 20 GB of operators.

So every stream of the file that has a filter (found by its `stream` keyword, its dictionary read
back to its `obj` header) is decoded here through its whole chain, each layer's output counted
against the document's budget and every decoder stopped as soon as the budget is passed
(pdf_filters.py): the scan costs at most the budget of decoding. What is decoded is what pdfium
decodes (its `PDF_DataDecode`), in the same order:

- every general-purpose filter: Flate, LZW, RunLength, ASCIIHex, ASCII85, in any chain; `Crypt`
  is passed over; an image filter (DCT, JPX, JBIG2, CCITTFax or a name pdfium does not know) ends
  the chain, the rest being left to an image decoder that works within the page's pixels;
- an image's last Flate or RunLength filter is the exception: pdfium streams it through a
  scanline decoder sized to the output (a 100 MB image renders within its page's pixels), so it
  is not counted, unless a page's `/Contents` names the stream, directly, in an array or through
  an indirect array (`/Contents 7 0 R`, object 7 `[4 0 R 5 0 R]`): content that calls itself an
  image is parsed as content all the same. An image's LZW is decoded whole by pdfium: counted.

Names are read as pdfium reads them (`#xx` escapes: `/Fl#61teDecode` is Flate) and a `/Filter`,
`/Length` or array given as an indirect object is resolved, in the file or in an object stream.
What cannot be checked is refused: a filter named through an object that is defined twice with
different values, where pdfium would take one of them by its cross-reference table (400), and more
than `MAX_LZW_BYTES` of LZW data, which would take seconds to decode here (413).
Not covered: a stream dictionary holding a literal string that looks like an `N G obj` header
(its dictionary is then read from that string on); only a subprocess with memory and time limits
would bound pdfium against every construct.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from .errors import InvalidRequest, PayloadTooLarge
from .pdf_filters import DECODERS, STREAMED_FOR_IMAGES

_STREAM = re.compile(rb">>\s*stream\r?\n")
_OBJECT_HEADER = re.compile(rb"(\d+)\s+\d+\s+obj\b")
_ESCAPE = re.compile(rb"#([0-9A-Fa-f]{2})")
_NAME = rb"/[^\s/\[\]<>()%{}]*"
_REF = rb"(\d+)\s+\d+\s+R"
_FILTER = re.compile(rb"/Filter\s*(\[[^\]]*\]|" + _NAME + rb"|\d+\s+\d+\s+R)")
_NAME_OR_REF = re.compile(rb"/([^\s/\[\]<>()%{}]*)|" + _REF)
_LENGTH = re.compile(rb"/Length\s+(\d+)(\s+\d+\s+R)?")
_INTEGER = re.compile(rb"\s*(\d+)")
_EARLY_CHANGE = re.compile(rb"/EarlyChange\s+0(?![0-9])")
_IMAGE = re.compile(rb"/Subtype\s*/Image(?![A-Za-z0-9])")
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm(?![A-Za-z0-9])")
_OBJECT_COUNT = re.compile(rb"/N\s+(\d+)")
_FIRST = re.compile(rb"/First\s+(\d+)")
# a page's content: `/Contents 4 0 R` or `/Contents [4 0 R 5 0 R]`
_CONTENTS = re.compile(rb"/Contents\s*(\[[^\]]{0,65536}\]|\d+\s+\d+\s+R)")
_REFERENCE = re.compile(_REF)
# how much of an object's definition is kept to resolve a name, number or array it holds
_BODY_BYTES = 1 << 16
# LZW data a document may hold: the check decodes it in Python at about 0.7-1 MB of input per
# second on the 2-core box (2026-12-02), so more would hold an image thread for seconds. LZW is
# PDF 1.0's compression, superseded by Flate in 1.2: today's writers do not produce it.
MAX_LZW_BYTES = 2 << 20
# filters named through objects that name filters through objects...: pdfium resolves one level
_FILTER_DEPTH = 2


def check_inflation(data: bytes, budget: int, field: str) -> int:
    """Bytes the file's filtered streams decode to as pdfium decodes them (at most `budget`);
    PayloadTooLarge, naming `field`, once they pass it; InvalidRequest where a stream's filters
    cannot be told."""
    spent = _Budget(budget, field)
    headers = list(_OBJECT_HEADER.finditer(data))
    objects = _Objects(data, headers)
    streams = list(_streams(data, headers))
    # object streams first: the objects they hold (page dictionaries, filter names) are resolved below
    streams.sort(key=lambda s: not s.object_stream)
    contents = _content_objects(data)
    images: list[tuple[_Stream, tuple[str, ...]]] = []
    for stream in streams:
        chain = _chain(stream.dictionary, objects, field)
        if not chain:
            continue
        if stream.image:
            images.append((stream, chain))
            continue
        output = _decode(stream.raw(data, objects), chain, spent, stream.early_change)
        if output is not None:
            contents |= _content_objects(output)  # page dictionaries may sit in compressed object streams
            if stream.object_stream:
                objects.add_object_stream(stream.dictionary, output)
    contents |= objects.array_members(contents)  # `/Contents 7 0 R` with object 7 an array of streams
    for stream, chain in images:
        _decode(stream.raw(data, objects), chain, spent, stream.early_change, image=stream.number not in contents)
    return spent.used


class _Budget:
    def __init__(self, budget: int, field: str):
        self.budget, self.used, self._field = budget, 0, field
        self._lzw = 0

    def lzw_input(self, size: int) -> None:
        """`size` more bytes of LZW data to decode: at most MAX_LZW_BYTES a document (413)."""
        self._lzw += size
        if self._lzw > MAX_LZW_BYTES:
            raise PayloadTooLarge(f"{self._field}: its LZW-compressed streams hold more than {MAX_LZW_BYTES} bytes, "
                                  "more than this server checks (LZW is decoded in Python, about 1 MB/s); save the "
                                  "document again with Flate compression", field=self._field)

    @property
    def remaining(self) -> int:
        return self.budget - self.used

    def spend(self, size: int) -> None:
        self.used += size
        if self.used > self.budget:
            raise PayloadTooLarge(f"{self._field}: its compressed streams inflate to more than {self.budget} bytes "
                                  "(a compression bomb, or a document too large to render: split it)",
                                  field=self._field)


def _unescaped(text: bytes) -> bytes:
    """Names with their `#xx` escapes decoded (`/Fl#61teDecode` is `/FlateDecode` to pdfium)."""
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), text) if b"#" in text else text


@dataclass(frozen=True)
class _Stream:
    number: int | None  # its object's number (None: no header found before it)
    dictionary: bytes  # escapes decoded
    start: int  # offset of its data
    end: int  # where its data ends at the latest: the next `endstream`, or its /Length if that is further

    @property
    def image(self) -> bool:
        return bool(_IMAGE.search(self.dictionary))

    @property
    def object_stream(self) -> bool:
        return bool(_OBJECT_STREAM.search(self.dictionary))

    @property
    def early_change(self) -> int:
        return 0 if _EARLY_CHANGE.search(self.dictionary) else 1

    def raw(self, data: bytes, objects: _Objects) -> bytes:
        """Its encoded data, as far as pdfium could read it: to the next `endstream`, or as far as
        its /Length (direct, or an object defined once or several times) says, if further."""
        end = self.end
        for found in _LENGTH.finditer(self.dictionary):
            lengths = [int(found.group(1))] if not found.group(2) else [
                int(m.group(1)) for body in objects.bodies(int(found.group(1)))
                if (m := _INTEGER.match(body)) is not None]
            end = max([end, *(self.start + length for length in lengths)])
        return data[self.start:min(end, len(data))]


def _streams(data: bytes, headers: list[re.Match[bytes]]):
    starts = [h.start() for h in headers]
    for found in _STREAM.finditer(data):
        at = bisect.bisect_left(starts, found.start()) - 1  # the last object header before the stream
        header = headers[at] if at >= 0 else None
        dictionary = _unescaped(data[header.end() if header else 0:found.start() + 2])
        end = data.find(b"endstream", found.end())
        yield _Stream(int(header.group(1)) if header else None, dictionary, found.end(),
                      len(data) if end < 0 else end)


class _Objects:
    """Object number -> the beginnings of its definitions: in the file (each `N G obj`, an
    incremental update's too) and in the object streams decoded so far."""

    def __init__(self, data: bytes, headers: list[re.Match[bytes]]):
        self._bodies: dict[int, set[bytes]] = {}
        for header in headers:
            body = data[header.end():header.end() + _BODY_BYTES]
            ends = [at for at in (body.find(b"endobj"), body.find(b"stream")) if at >= 0]
            self._add(int(header.group(1)), body[:min(ends)] if ends else body)

    def _add(self, number: int, body: bytes) -> None:
        self._bodies.setdefault(number, set()).add(_unescaped(body.strip()))

    def bodies(self, number: int) -> set[bytes]:
        return self._bodies.get(number, set())

    def add_object_stream(self, dictionary: bytes, output: bytes) -> None:
        """The objects an object stream holds: `/N` pairs of (number, offset from `/First`)."""
        count, first = _OBJECT_COUNT.search(dictionary), _FIRST.search(dictionary)
        if count is None or first is None:
            return
        offset = int(first.group(1))
        numbers = [int(n) for n in output[:offset].split()[:2 * int(count.group(1))] if n.isdigit()]
        pairs = list(zip(numbers[::2], numbers[1::2]))
        for i, (number, start) in enumerate(pairs):
            end = pairs[i + 1][1] if i + 1 < len(pairs) else len(output) - offset
            self._add(number, output[offset + start:offset + min(end, start + _BODY_BYTES)])

    def array_members(self, numbers: set[int | None]) -> set[int | None]:
        """The objects named by those of `numbers` that are arrays."""
        members: set[int | None] = set()
        for number in numbers:
            for body in self.bodies(number) if number is not None else ():
                if body.startswith(b"["):
                    members.update(int(ref.group(1)) for ref in _REFERENCE.finditer(body))
        return members


def _content_objects(data: bytes) -> set[int | None]:
    """Object numbers that pages name as their content (directly or as the array holding them)."""
    numbers: set[int | None] = set()
    for found in _CONTENTS.finditer(_unescaped(data)):  # `/C#6fntents` is `/Contents` to pdfium
        numbers.update(int(ref.group(1)) for ref in _REFERENCE.finditer(found.group(1)))
    return numbers


def _chain(dictionary: bytes, objects: _Objects, field: str) -> tuple[str, ...]:
    """The stream's filters in order (names as pdfium reads them), indirect ones resolved."""
    chains = {_filter_names(value, objects, field, 0) for value in _FILTER.findall(dictionary)}
    if len(chains) > 1:
        raise _unclear(field, "a stream's dictionary names its /Filter more than once, differently")
    return chains.pop() if chains else ()


def _filter_names(value: bytes, objects: _Objects, field: str, depth: int) -> tuple[str, ...]:
    names: list[str] = []
    for found in _NAME_OR_REF.finditer(value):
        if found.group(1) is not None:
            names.append(found.group(1).decode("latin-1"))
            continue
        if depth >= _FILTER_DEPTH:
            continue
        bodies = objects.bodies(int(found.group(2)))
        resolved = {_filter_names(body, objects, field, depth + 1) for body in bodies
                    if body.startswith((b"/", b"["))}
        if len(resolved) > 1:
            raise _unclear(field, f"a stream's /Filter names object {found.group(2).decode()}, which is defined "
                                  "more than once with different filters")
        if resolved:
            names.extend(resolved.pop())
    return tuple(names)


def _unclear(field: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {what}, so what it decodes to cannot be checked; save the document again "
                          "(a PDF writer's 'save as' rewrites it without incremental updates)", field=field)


def _decode(raw: bytes, chain: tuple[str, ...], spent: _Budget, early_change: int,
            image: bool = False) -> bytes | None:
    """Decode `raw` through `chain` as pdfium does, counting every layer's output; the last
    layer's output, or None where pdfium hands the rest to an image decoder."""
    data = raw
    for position, name in enumerate(chain):
        if name == "Crypt":
            continue
        decoder = DECODERS.get(name)
        if decoder is None or (image and position == len(chain) - 1 and name in STREAMED_FOR_IMAGES):
            return None
        if name in ("LZWDecode", "LZW"):
            spent.lzw_input(len(data))
        data = decoder(data, spent.remaining, early_change)
        spent.spend(len(data))
    return data
