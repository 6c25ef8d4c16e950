"""PDF documents for the document-item tests: well-formed ones built with pypdfium2's own
writer (pages of given sizes, each with a picture on it), and hostile ones written by hand,
object by object, so each carries exactly the construct under test (an /Encrypt dictionary,
JavaScript, a form, an image that inflates to gigabytes, a reference to a file)."""

from __future__ import annotations

import io
import zlib
from collections.abc import Sequence

import numpy as np


def make_pdf(sizes: Sequence[tuple[float, float]], seed: int = 0, rotation: int = 0) -> bytes:
    """A PDF with one page per (width, height) in points, each with a random 8 x 8 picture drawn
    over its middle quarter (so every page embeds differently), shown rotated by `rotation`."""
    import pypdfium2 as pdfium
    from PIL import Image

    rng = np.random.default_rng(seed)
    pdf = pdfium.PdfDocument.new()
    for width, height in sizes:
        page = pdf.new_page(width, height)
        picture = pdfium.PdfImage.new(pdf)
        picture.set_bitmap(pdfium.PdfBitmap.from_pil(Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))))
        picture.set_matrix(pdfium.PdfMatrix().scale(width / 2, height / 2).translate(width / 4, height / 4))
        page.insert_obj(picture)
        page.gen_content()
        page.set_rotation(rotation)
    buffer = io.BytesIO()
    pdf.save(buffer)
    return buffer.getvalue()


def reference_render(data: bytes, number: int, scale: float):
    """pypdfium2's own rendering of page `number` (1-based) at `scale` as an RGB PIL image."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(data)
    try:
        return pdf[number - 1].render(scale=scale).to_pil().convert("RGB")
    finally:
        pdf.close()


def hand_written_pdf(objects: Sequence[bytes], trailer_extra: bytes = b"") -> bytes:
    """A PDF from its objects' bodies (object i + 1 is objects[i]; object 1 is the catalog), with
    a correct cross-reference table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer_extra, xref)
    return bytes(out)


def stream(dictionary: bytes, data: bytes) -> bytes:
    return b"<< %s /Length %d >>\nstream\n" % (dictionary, len(data)) + data + b"\nendstream"


def _page_objects(content: bytes, resources: bytes = b"<< >>", page_extra: bytes = b"",
                  box: bytes = b"0 0 200 200") -> list[bytes]:
    """Catalog (1), pages (2), one page (3) with `content` as its content stream (4)."""
    return [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [%s] /Resources %s /Contents 4 0 R %s>>"
            % (box, resources, page_extra),
            stream(b"", content)]


def encrypted_pdf() -> bytes:
    """A document under the standard security handler (RC4, revision 3) whose user password is not
    empty: /O and /U that no empty password matches, so it opens only with a password."""
    objects = _page_objects(b"")
    encrypt = (b"<< /Filter /Standard /V 2 /R 3 /Length 128 /P -3904 /O <%s> /U <%s> >>"
               % (b"ab" * 32, b"cd" * 32))
    objects.append(encrypt)
    return hand_written_pdf(objects, b"/Encrypt 5 0 R /ID [<%s> <%s>] " % (b"01" * 16, b"01" * 16))


def javascript_form_pdf() -> bytes:
    """A page with a black square, JavaScript run on open (/OpenAction) and in a form field's
    actions, an AcroForm with a text widget, a link to a URL and a /Launch of a file: none of which
    may run or be followed; only the square is drawn."""
    objects = _page_objects(b"0 0 0 rg 50 50 100 100 re f",
                            page_extra=b"/Annots [6 0 R 7 0 R] /AA << /O 8 0 R >>")
    objects[0] = (b"<< /Type /Catalog /Pages 2 0 R /OpenAction 8 0 R /AcroForm << /Fields [6 0 R] /NeedAppearances "
                  b"true >> /Names << /JavaScript << /Names [(boom) 8 0 R] >> >> >>")
    objects.append(b"<< >>")  # 5: unused
    objects.append(b"<< /Type /Annot /Subtype /Widget /FT /Tx /T (name) /V (hello) /Rect [10 10 190 40] "
                   b"/AA << /K 8 0 R /F 8 0 R >> >>")  # 6: a form field
    objects.append(b"<< /Type /Annot /Subtype /Link /Rect [0 150 200 200] /A << /S /URI "
                   b"/URI (http://127.0.0.1:9/x) >> >>")  # 7: a link
    objects.append(b"<< /S /JavaScript /JS (app.launchURL('http://127.0.0.1:9/'); this.exportAsFDF();) "
                   b"/Next << /S /Launch /F (/etc/passwd) >> >>")  # 8
    return hand_written_pdf(objects)


def image_bomb_pdf(side: int = 10000) -> bytes:
    """A page drawing one `side` x `side` grey image whose Flate stream inflates to side**2 bytes
    (100 MB at 10,000) from about 440 KB."""
    compressor = zlib.compressobj(1)
    block = bytes(side * 500)  # 500 rows at a time: level 1 over zeros is fast and still ~1000:1
    data = b"".join(compressor.compress(block) for _ in range(side // 500)) + compressor.flush()
    objects = _page_objects(b"q 200 0 0 200 0 0 cm /Im0 Do Q", b"<< /XObject << /Im0 5 0 R >> >>")
    objects.append(stream(b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray "
                          b"/BitsPerComponent 8 /Filter /FlateDecode" % (side, side), data))
    return hand_written_pdf(objects)


def external_file_pdf(path: str) -> bytes:
    """A page whose only image takes its data from an external file (`/F`, PDF 1.7 7.3.8.2): if
    it were followed, the page would not be blank."""
    objects = _page_objects(b"q 200 0 0 200 0 0 cm /Im0 Do Q", b"<< /XObject << /Im0 5 0 R >> >>")
    objects.append(stream(b"/Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceGray "
                          b"/BitsPerComponent 8 /F (%s) /FFilter /FlateDecode" % path.encode(), b""))
    return hand_written_pdf(objects)


def page_box_pdf(width: float, height: float) -> bytes:
    """One page of `width` x `height` points with a black square in its middle."""
    box = b"0 0 %g %g" % (width, height)
    return hand_written_pdf(_page_objects(b"0 0 0 rg %g %g %g %g re f" % (width / 4, height / 4, width / 2, height / 2),
                                          box=box))


def broken_page_pdf() -> bytes:
    """A well-formed file whose page tree names a page that is not a page object (the integer 42)."""
    return hand_written_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                             b"42"])


def content_bomb_pdf(megabytes: int = 5) -> bytes:
    """A page whose content stream, compressed twice ([/FlateDecode /FlateDecode]), inflates to
    `megabytes` MB of path operators (pdfium would inflate and parse them all) from under 1 KB."""
    block = b"0 0 m 200 200 l S\n" * (2**20 // 18)
    compressor = zlib.compressobj(9)
    once = b"".join(compressor.compress(block) for _ in range(megabytes)) + compressor.flush()
    objects = _page_objects(b"")
    objects[3] = stream(b"/Filter [/FlateDecode /FlateDecode]", zlib.compress(once, 9))
    return hand_written_pdf(objects)


def lzw_encode(data: bytes) -> bytes:
    """PDF's LZWDecode encoding (early change 1): 9- to 12-bit codes, a clear code when the table
    nears 4,096 entries, the end code last."""
    out = bytearray()
    state = {"buffer": 0, "bits": 0, "width": 9}

    def emit(code: int) -> None:
        state["buffer"] = (state["buffer"] << state["width"]) | code
        state["bits"] += state["width"]
        while state["bits"] >= 8:
            state["bits"] -= 8
            out.append((state["buffer"] >> state["bits"]) & 0xFF)
        state["buffer"] &= (1 << state["bits"]) - 1

    table = {bytes([i]): i for i in range(256)}
    emit(256)
    word = b""
    for value in data:
        longer = word + bytes([value])
        if longer in table:
            word = longer
            continue
        emit(table[word])
        table[longer] = len(table) + 2  # codes 256 and 257 are not in the dict
        word = bytes([value])
        size = len(table) + 2
        if size >= 4000:  # start a new table before the 12-bit codes run out
            emit(256)
            table = {bytes([i]): i for i in range(256)}
            state["width"] = 9
        elif size >= 1 << state["width"]:  # the decoder widens one code early
            state["width"] += 1
    if word:
        emit(table[word])
    emit(257)
    if state["bits"]:
        out.append((state["buffer"] << (8 - state["bits"])) & 0xFF)
    return bytes(out)


def run_length_encode(data: bytes) -> bytes:
    """PDF's RunLengthDecode encoding: runs of up to 128 equal bytes as 2 bytes, the rest literal."""
    out = bytearray()
    position = 0
    while position < len(data):
        run = 1
        while run < 128 and position + run < len(data) and data[position + run] == data[position]:
            run += 1
        if run > 1:
            out += bytes([257 - run, data[position]])
        else:
            out += bytes([0, data[position]])
        position += run
    return bytes(out + b"\x80")


def encode_chain(data: bytes, chain: Sequence[str]) -> bytes:
    """`data` encoded so that decoding it through `chain` (PDF's order: the first filter is
    decoded first) gives it back."""
    import base64

    encoders = {"FlateDecode": lambda d: zlib.compress(d, 9), "LZWDecode": lzw_encode,
                "RunLengthDecode": run_length_encode, "ASCIIHexDecode": lambda d: d.hex().encode() + b">",
                "ASCII85Decode": lambda d: base64.a85encode(d, wrapcol=76) + b"~>"}
    for name in reversed(chain):
        data = encoders[name](data)
    return data


def filtered_content_pdf(content: bytes, chain: Sequence[str], filter_entry: bytes | None = None) -> bytes:
    """A one-page document whose content stream is `content` encoded through `chain`
    (`filter_entry`: the dictionary's /Filter entry as written, default the chain's names)."""
    names = b" ".join(b"/" + name.encode() for name in chain)
    objects = _page_objects(b"")
    objects[3] = stream(filter_entry if filter_entry is not None else b"/Filter [%s]" % names,
                        encode_chain(content, chain))
    return hand_written_pdf(objects)
