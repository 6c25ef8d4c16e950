"""PDF's general-purpose stream filters, each decoding at most `limit + 1` bytes.

pdf_inflation.py runs a stream's filter chain through these to count what pdfium would hold once
it decoded the stream, stopping as soon as the count passes the document's budget. Each decoder
stops where pdfium's stops (its end marker, or the first error, keeping what came before) and
returns at most `limit + 1` bytes, so a bomb costs at most the budget to find. Where pdfium is
more lenient than the specification (characters that are not digits inside ASCIIHex and
ASCII85 data are skipped), so are these: the count may only come out higher.

Bounds on what each can make of `n` input bytes, for the record: Flate about 1032 n, LZW about
4096 n / 1.5 (a 12-bit code names an entry of up to 4,096 bytes), RunLength 64 n (two bytes make
128), ASCII85 4 n (`z` is four zero bytes), ASCIIHex n / 2.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Callable

# Input fed to zlib per call, so an error late in a stream keeps what came before it.
_FLATE_PIECE = 1 << 16
_NOT_HEX = re.compile(rb"[^0-9A-Fa-f]")
_NOT_A85 = re.compile(rb"[^!-uz]")
_A85_PIECE = 5 << 16


def flate(data: bytes, limit: int, early_change: int = 1) -> bytes:
    decompressor = zlib.decompressobj()
    out = bytearray()
    view = memoryview(data)
    try:
        for start in range(0, len(view), _FLATE_PIECE):
            pending: bytes | memoryview = view[start:start + _FLATE_PIECE]
            while pending and len(out) <= limit and not decompressor.eof:
                out += decompressor.decompress(pending, limit + 1 - len(out))
                pending = decompressor.unconsumed_tail
            if len(out) > limit or decompressor.eof:
                break
    except zlib.error:
        pass  # pdfium keeps what was inflated before the error
    return bytes(out)


def lzw(data: bytes, limit: int, early_change: int = 1) -> bytes:
    """LZWDecode: 9- to 12-bit codes, 256 clears the table, 257 ends; with `early_change` (the
    default, 1) the code width grows one code early."""
    out = bytearray()
    table: list[bytes] = [bytes([i]) for i in range(256)] + [b"", b""]
    width, previous = 9, b""
    buffer = bits = 0
    for byte in data:
        buffer, bits = (buffer << 8) | byte, bits + 8
        while bits >= width:
            bits -= width
            code = buffer >> bits
            buffer &= (1 << bits) - 1
            if code == 256:
                del table[258:]
                width, previous = 9, b""
                continue
            if code == 257:
                return bytes(out)
            if code < len(table):
                entry = table[code]
                if previous and len(table) < 4096:
                    table.append(previous + entry[:1])
            elif code == len(table) and previous:  # the entry being defined (KwKwK)
                entry = previous + previous[:1]
                table.append(entry)
            else:
                return bytes(out)  # a code not defined yet: pdfium stops here too
            out += entry
            if len(out) > limit:
                return bytes(out)
            previous = entry
            if len(table) + early_change >= 1 << width and width < 12:
                width += 1
    return bytes(out)


def run_length(data: bytes, limit: int, early_change: int = 1) -> bytes:
    """RunLengthDecode: a length byte n < 128 copies n + 1 bytes, n > 128 repeats the next byte
    257 - n times, 128 ends."""
    out = bytearray()
    position, size = 0, len(data)
    while position < size and len(out) <= limit:
        length = data[position]
        if length == 128:
            break
        if length < 128:
            out += data[position + 1:position + 2 + length]
            position += length + 2
        else:
            out += data[position + 1:position + 2] * (257 - length)
            position += 2
    return bytes(out)


def ascii_hex(data: bytes, limit: int, early_change: int = 1) -> bytes:
    """ASCIIHexDecode: hex digits up to `>`, an odd last digit followed by 0."""
    end = data.find(b">")
    digits = _NOT_HEX.sub(b"", data if end < 0 else data[:end])[:2 * (limit + 1)]
    if len(digits) % 2:
        digits += b"0"
    return binascii.unhexlify(digits)


def ascii85(data: bytes, limit: int, early_change: int = 1) -> bytes:
    """ASCII85Decode: groups of five characters `!`..`u` make four bytes, `z` four zero bytes,
    `~>` ends; a group whose value passes 2^32 stops the decoding."""
    end = data.find(b"~>")
    text = _NOT_A85.sub(b"", data if end < 0 else data[:end])
    out = bytearray()
    carry = b""
    try:
        for start in range(0, len(text), _A85_PIECE):
            piece = carry + text[start:start + _A85_PIECE].replace(b"z", b"!!!!!")  # both are four zero bytes
            cut = len(piece) - len(piece) % 5
            out += base64.a85decode(piece[:cut])
            carry = piece[cut:]
            if len(out) > limit:
                return bytes(out[:limit + 1])
        if len(carry) > 1:  # a last partial group of n characters is n - 1 bytes
            out += base64.a85decode(carry)
    except ValueError:
        pass  # pdfium stops at a bad group, keeping what came before
    return bytes(out[:limit + 1])


Decoder = Callable[[bytes, int, int], bytes]
# the general-purpose filters by their names and abbreviations (PDF 1.7, tables 6 and 94)
DECODERS: dict[str, Decoder] = {
    "FlateDecode": flate, "Fl": flate,
    "LZWDecode": lzw, "LZW": lzw,
    "RunLengthDecode": run_length, "RL": run_length,
    "ASCIIHexDecode": ascii_hex, "AHx": ascii_hex,
    "ASCII85Decode": ascii85, "A85": ascii85,
}
# the filters pdfium leaves to an image's scanline decoder when they come last in an image's chain
STREAMED_FOR_IMAGES = frozenset({"FlateDecode", "Fl", "RunLengthDecode", "RL"})
