"""The PDF decoding bound against hand-built hostile documents (issue #30): content streams under
every general-purpose filter and chains of them, named through escapes and indirect objects,
hidden behind an image mark in an indirect `/Contents` array. Each hostile stream is first shown
to be real: pdfium parses the page objects its decoded content draws, so the bound is checked
against what pdfium would decode, not against what these tests' encoders think it does."""

from __future__ import annotations

import zlib

import pypdfium2
import pytest

from pdf_fixtures import encode_chain, filtered_content_pdf, hand_written_pdf, lzw_encode, stream
from sie_engine.errors import InvalidRequest, PayloadTooLarge
from sie_engine.pdf_inflation import MAX_LZW_BYTES, check_inflation

BUDGET = 64 * 1024
PATH = b"0 0 m 200 200 l S\n"  # one path object per repetition
SMALL = PATH * 50  # 900 bytes: within the budget
BOMB = PATH * 5000  # 90,000 bytes: past it

CHAINS = [["LZWDecode"], ["RunLengthDecode"], ["ASCIIHexDecode"], ["ASCII85Decode"],
          ["ASCIIHexDecode", "FlateDecode"], ["ASCII85Decode", "LZWDecode"], ["FlateDecode", "RunLengthDecode"],
          ["ASCII85Decode", "FlateDecode", "FlateDecode"]]


def path_objects(document: bytes) -> int:
    """Page objects pdfium parses from the first page's content."""
    pdf = pypdfium2.PdfDocument(document)
    try:
        return len(list(pdf[0].get_objects()))
    finally:
        pdf.close()


def layer_outputs(content: bytes, chain: list[str]) -> int:
    """Bytes every layer of `chain` outputs when decoding `content`'s encoding."""
    return sum(len(encode_chain(content, chain[position + 1:])) for position in range(len(chain)))


@pytest.mark.parametrize("chain", CHAINS, ids="+".join)
def test_every_filter_and_chain_is_counted_as_pdfium_decodes_it(chain):
    document = filtered_content_pdf(SMALL, chain)
    assert path_objects(document) == 50  # pdfium decodes this encoding to the content
    assert check_inflation(document, BUDGET, "d") == layer_outputs(SMALL, chain)
    with pytest.raises(PayloadTooLarge, match="inflate to more than 65536 bytes"):  # before: 0 bytes counted
        check_inflation(filtered_content_pdf(BOMB, chain), BUDGET, "d")


@pytest.mark.parametrize("entry", [b"/Filter /#46lateDecode", b"/Filter [/#46#6c]", b"/F#69lter /LZW#44ecode"])
def test_escaped_and_abbreviated_filter_names_are_read_as_pdfium_reads_them(entry):
    chain = ["LZWDecode"] if b"LZW" in entry else ["FlateDecode"]
    assert path_objects(filtered_content_pdf(SMALL, chain, entry)) == 50
    with pytest.raises(PayloadTooLarge):  # before: not seen as filters
        check_inflation(filtered_content_pdf(BOMB, chain, entry), BUDGET, "d")


def indirect_filter_pdf(content: bytes, definitions: list[bytes]) -> bytes:
    """The content stream's /Filter is object 5; `definitions` are its bodies (an incremental
    update defines it again)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>",
               stream(b"/Filter 5 0 R", encode_chain(content, ["FlateDecode", "FlateDecode"])), definitions[0]]
    document = hand_written_pdf(objects)
    for again in definitions[1:]:  # appended as an update: pdfium reads the newest by its table
        document += b"5 0 obj\n" + again + b"\nendobj\n"
    return document


def test_a_filter_given_as_an_indirect_object_is_resolved():
    assert path_objects(indirect_filter_pdf(SMALL, [b"[/FlateDecode /FlateDecode]"])) == 50
    with pytest.raises(PayloadTooLarge):
        check_inflation(indirect_filter_pdf(BOMB, [b"[/FlateDecode /FlateDecode]"]), BUDGET, "d")
    with pytest.raises(InvalidRequest, match="defined more than once with different filters"):
        check_inflation(indirect_filter_pdf(SMALL, [b"[/FlateDecode /FlateDecode]", b"/DCTDecode"]), BUDGET, "d")


def image_marked_contents_pdf(content: bytes) -> bytes:
    """A page whose /Contents is object 6, an array of two streams that call themselves images."""
    half = len(content) // 2 // len(PATH) * len(PATH)
    marked = b"/Type /XObject /Subtype /Image /Width 1 /Height 1 /Filter /FlateDecode"
    return hand_written_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 6 0 R >>",
        stream(marked, zlib.compress(content[:half], 9)), stream(marked, zlib.compress(content[half:], 9)),
        b"[4 0 R 5 0 R]"])


def test_image_marked_content_named_through_an_indirect_array_is_counted():
    assert path_objects(image_marked_contents_pdf(SMALL)) == 50  # pdfium draws them as content
    with pytest.raises(PayloadTooLarge):  # before: skipped as images
        check_inflation(image_marked_contents_pdf(BOMB), BUDGET, "d")


def image_pdf(chain: list[str], pixels: bytes, encoded: bytes | None = None) -> bytes:
    """A page drawing one square grayscale image of `pixels`, encoded through `chain` (or `encoded`)."""
    names = b" ".join(b"/" + name.encode() for name in chain)
    side = int(len(pixels) ** 0.5)
    image = stream(b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
                   b"/BitsPerComponent 8 /Filter [%s]" % (side, side, names),
                   encoded if encoded is not None else encode_chain(pixels, chain))
    return hand_written_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Resources << /XObject << /I 5 0 R >> >> "
        b"/Contents 4 0 R >>", stream(b"", b"q 200 0 0 200 0 0 cm /I Do Q"), image])


def test_an_image_counts_all_but_the_filter_pdfium_streams():
    pixels = b"\x00" * 400 * 400  # 160,000 bytes
    assert check_inflation(image_pdf(["FlateDecode"], pixels), BUDGET, "d") == 0  # streamed within the pixels
    assert check_inflation(image_pdf(["RunLengthDecode"], pixels), BUDGET, "d") == 0
    # the first Flate of two is inflated whole before the last one is streamed: here to the 160 KB
    # of an uncompressed (stored) deflate stream of the pixels
    stored = zlib.compress(pixels, 0)
    assert path_objects(image_pdf(["FlateDecode", "FlateDecode"], pixels, zlib.compress(stored, 9))) == 1
    assert check_inflation(image_pdf(["FlateDecode", "FlateDecode"], pixels), BUDGET, "d") < 1000
    with pytest.raises(PayloadTooLarge):
        check_inflation(image_pdf(["FlateDecode", "FlateDecode"], pixels, zlib.compress(stored, 9)), BUDGET, "d")
    with pytest.raises(PayloadTooLarge):  # pdfium decodes an image's LZW whole
        check_inflation(image_pdf(["LZWDecode"], pixels), BUDGET, "d")


def test_more_lzw_than_the_check_decodes_is_refused():
    noise = zlib.compress(bytes(range(256)) * 16)  # LZW barely shrinks it
    big = lzw_encode(noise) * (MAX_LZW_BYTES // len(lzw_encode(noise)) + 2)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>",
               stream(b"/Filter /LZWDecode", big)]
    with pytest.raises(PayloadTooLarge, match="save the document again with Flate"):
        check_inflation(hand_written_pdf(objects), 1 << 30, "d")
