"""Document (PDF) items: a real `sie-server serve` with a tiny random CLIP renders each page of a
PDF with pypdfium2 and embeds it as an image. Proven here: the rendered pages equal pypdfium2's
own rendering at the same scale; each page's vector equals the same server's vector for that
rendering sent as an image item (and transformers' on the same weights); the answer keeps pages
apart (one item per page, its number, sizes and document); JSON (base64, data: URI), msgpack
(raw bytes) and the client (sync, async, embedded) carry documents; and every class of hostile
document gets a clear 4xx, or is rendered within the bounds, while the server keeps serving."""

from __future__ import annotations

import asyncio
import base64
import io
import time
import zlib
from pathlib import Path

import httpx
import msgpack
import numpy as np
import pytest

from colpali_fixtures import make_tiny_colpali
from image_fixtures import assert_cosine, make_tiny_clip, reference_features
from pdf_fixtures import (
    broken_page_pdf,
    content_bomb_pdf,
    encrypted_pdf,
    external_file_pdf,
    filtered_content_pdf,
    image_bomb_pdf,
    javascript_form_pdf,
    make_pdf,
    page_box_pdf,
    reference_render,
)
from server_fixtures import start_server
from sie_client import EMBEDDED, AsyncSIEClient, SIEClient
from sie_engine.admission import upper_bound_tokens
from sie_engine.documents import plan_document
from sie_engine.validation import DocumentItem, Limits

SIZES = [(200, 300), (300, 200), (144, 144)]  # points: portrait, landscape, square
MAX_PAGE_PIXELS = 250_000  # the server's bound, low so the huge-page test renders little


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_tiny_clip(tmp_path_factory.mktemp("document-models") / "clip")


@pytest.fixture(scope="module")
def colpali(tmp_path_factory) -> Path:
    return make_tiny_colpali(tmp_path_factory.mktemp("document-models") / "colpali")


@pytest.fixture(scope="module")
def server(clip, colpali, tmp_path_factory):
    process = start_server("--model", f"clip={clip}", "--model", f"colpali={colpali}", "--preload", "clip",
                           "--max-image-pixels", "4000000",
                           "--max-page-pixels", str(MAX_PAGE_PIXELS), "--max-document-inflated-bytes", "4MiB",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def document() -> bytes:
    return make_pdf(SIZES)


def png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def encode_json(server, items: list, **fields) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/encode/clip", json={"items": items, "normalize": False, **fields}, timeout=60)


def encode_msgpack(server, items: list) -> httpx.Response:
    body = msgpack.packb({"items": items, "normalize": False}, use_bin_type=True)
    return httpx.post(f"{server.url}/v1/encode/clip", content=body, timeout=60,
                      headers={"Content-Type": "application/msgpack", "Accept": "application/json"})


def dense(answer: dict) -> np.ndarray:
    return np.array([item["dense"] for item in answer["items"]], dtype=np.float32)


def test_rendered_pages_equal_pypdfium2_at_the_same_scale(document):
    for dpi in (72, 144):
        pages = plan_document(DocumentItem(document, None, dpi), Limits(), "items[0].document", 0)
        assert [p.page.number for p in pages] == [1, 2, 3]
        for page, (width, height) in zip(pages, SIZES):
            ours = page.picture("d")
            reference = reference_render(document, page.page.number, dpi / 72)
            assert ours.size == reference.size == (page.page.width_px, page.page.height_px) == \
                (width * dpi // 72, height * dpi // 72)
            assert np.array_equal(np.asarray(ours), np.asarray(reference))
    rotated = make_pdf([(200, 300)], rotation=90)  # a page shown in landscape: its size as displayed
    (page,) = plan_document(DocumentItem(rotated, None, 72), Limits(), "d", 0)
    assert (page.page.width, page.page.height, *page.size) == (300, 200, 300, 200)
    assert np.array_equal(np.asarray(page.picture("d")), np.asarray(reference_render(rotated, 1, 1.0)))


def test_pages_over_json_equal_their_renderings_sent_as_images(server, clip, document):
    uri = "data:application/pdf;base64," + base64.b64encode(document).decode()
    answer = encode_json(server, [{"id": "doc", "document": uri, "dpi": 72}, "the cat"])
    assert answer.status_code == 200, answer.text
    items = answer.json()["items"]
    assert [item["id"] for item in items] == ["doc", "doc", "doc", "1"]
    assert [item["page"] for item in items[:3]] == [
        {"item": 0, "number": n, "width": w, "height": h, "width_px": w, "height_px": h}
        for n, (w, h) in enumerate(SIZES, start=1)]
    assert "page" not in items[3]
    renders = [png(reference_render(document, n, 1.0)) for n in (1, 2, 3)]
    as_images = encode_json(server, [{"image": base64.b64encode(data).decode()} for data in renders])
    assert np.allclose(dense(answer.json())[:3], dense(as_images.json()), atol=1e-6)
    assert_cosine(dense(answer.json()), reference_features("clip", clip, renders, ["the cat"]))


def test_msgpack_raw_bytes_with_chosen_pages_in_the_order_given(server, document):
    response = encode_msgpack(server, ["a text", {"document": document, "pages": [3, 1], "dpi": 36}])
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [(item["id"], item.get("page", {}).get("number")) for item in items] == [("0", None), ("1", 3), ("1", 1)]
    assert items[1]["page"]["width_px"] == 72 and items[2]["page"]["height_px"] == 150
    renders = [png(reference_render(document, n, 0.5)) for n in (3, 1)]
    as_images = encode_msgpack(server, [{"image": data} for data in renders])
    assert np.allclose(dense(response.json())[1:], dense(as_images.json()), atol=1e-6)


def test_colpali_page_multivectors_equal_the_pages_sent_as_images_and_score_refuses_documents(server, document):
    def encode(items: list) -> list[np.ndarray]:
        response = httpx.post(f"{server.url}/v1/encode/colpali", json={"items": items, "output_types": ["multivector"]},
                              timeout=60)
        assert response.status_code == 200, response.text
        return [np.asarray(item["multivector"], dtype=np.float32) for item in response.json()["items"]]

    pages = encode([{"document": base64.b64encode(document).decode(), "dpi": 72}])
    renders = [png(reference_render(document, n, 1.0)) for n in (1, 2, 3)]
    images = encode([{"image": base64.b64encode(data).decode()} for data in renders])
    assert len(pages) == 3 and all(np.allclose(a, b, atol=1e-5) for a, b in zip(pages, images))
    score = httpx.post(f"{server.url}/v1/score/colpali", timeout=60, json={
        "query": "revenue", "items": [{"document": base64.b64encode(document).decode()}]})
    assert score.status_code == 400 and "encode the document" in score.json()["error"]["message"]


def test_clients_sync_async_and_embedded_keep_pages_apart(server, clip, document, tmp_path):
    path = tmp_path / "doc.pdf"
    path.write_bytes(document)
    items = [{"id": "d", "document": path, "pages": "2-", "dpi": 72}, "x"]  # a range: page 2 to the last
    with SIEClient(server.url, encoding="msgpack") as client:
        sync = client.encode("clip", items, normalize=False)

    async def encode():
        async with AsyncSIEClient(server.url, encoding="json") as client:
            return await client.encode("clip", items, normalize=False)

    results = [sync, asyncio.run(encode())]
    with SIEClient(EMBEDDED, local_models={"clip": str(clip)}, device="cpu") as client:
        results.append(client.encode("clip", items, normalize=False))
    for result in results:
        assert [(item.id, item.page and item.page.number) for item in result.items] == [("d", 2), ("d", 3), ("1", None)]
        assert result.items[0].page.width == 300 and result.items[0].page.height_px == 200
        assert np.allclose(result.dense_matrix(), sync.dense_matrix(), atol=1e-5)
    # a client's chunks: a page's `item` is its document's index in the whole request
    with SIEClient(server.url, batch_size=1) as client:
        chunked = client.encode("clip", ["x", {"document": document, "pages": [1]}], normalize=False)
    assert chunked.items[1].page.item == 1


def _thousand_pages() -> bytes:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    for _ in range(3000):
        pdf.new_page(10, 10)
    buffer = io.BytesIO()
    pdf.save(buffer)
    return buffer.getvalue()


HOSTILE = {  # name: (the document, its status, what the message says)
    "not a PDF": (lambda: b"GIF89a not a document", 400, "is not a PDF"),
    "malformed": (lambda: b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage", 400, "malformed or truncated PDF"),
    "truncated": (lambda: make_pdf([(100, 100)])[:300], 400, "malformed or truncated PDF"),
    "a page that is not a page": (broken_page_pdf, 400, "malformed PDF"),
    "a content stream that inflates to 5 MB": (content_bomb_pdf, 413, "inflate to more than 4194304 bytes"),
    "a RunLength content stream that decodes to 5 MB": (
        lambda: filtered_content_pdf(b" " * (5 << 20), ["RunLengthDecode"]), 413, "inflate to more than 4194304 bytes"),
    "encrypted": (encrypted_pdf, 400, "encrypted PDF that needs a password"),
    "thousands of pages": (_thousand_pages, 413, "has 3000 pages; at most 64"),
    "a page too thin for the model": (lambda: page_box_pdf(1, 14400), 413,
                                      "this model's preprocessing would resize it"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_documents_get_a_4xx_and_the_server_keeps_serving(server, name):
    build, status, fragment = HOSTILE[name]
    response = encode_msgpack(server, ["fine", {"document": build()}])
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    assert fragment in message and "items[1].document" in message
    assert encode_json(server, ["still serving"]).status_code == 200


@pytest.mark.parametrize("item, status, fragment", [
    ({"document": "https://example.com/a.pdf"}, 400, "does not fetch URLs"),
    ({"document": "not base64!"}, 400, "not valid base64"),
    ({"document": 12}, 400, "must be bytes"),
    ({"text": "x", "pages": [1]}, 400, "applies to a document item only"),
    ({"document": "JVBERi0=", "dpi": 5000}, 400, "dpi"),
    ({"document": "JVBERi0=", "pages": [0]}, 400, "pages"),
    ({"document": "JVBERi0=", "pages": "one to three"}, 400, "pages"),
])
def test_bad_document_fields_are_400s(server, item, status, fragment):
    response = encode_json(server, [item])
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]["message"]


def test_pages_beyond_the_document_and_too_many_items_are_refused(server, document):
    encoded = base64.b64encode(document).decode()
    beyond = encode_json(server, [{"document": encoded, "pages": [2, 9]}])
    assert beyond.status_code == 400 and "names page 9, but the document has 3" in beyond.json()["error"]["message"]
    backwards = encode_json(server, [{"document": encoded, "pages": "1, 3-2"}])
    assert backwards.status_code == 400 and "3-2, which runs backwards" in backwards.json()["error"]["message"]
    many = encode_json(server, [{"document": encoded, "pages": "1-100000"}])  # refused before it is expanded
    assert many.status_code == 413 and "names 100000 pages; at most 64" in many.json()["error"]["message"]
    over = encode_msgpack(server, [{"document": b"%PDF-" + bytes(21 * 2**20)}])
    assert over.status_code == 413 and "per document" in over.json()["error"]["message"]


def test_a_huge_page_box_is_rendered_within_the_pixel_bound(server):
    data = page_box_pdf(14400, 14400)  # 200 x 200 inches: 829M pixels at 144 DPI
    response = encode_msgpack(server, [{"document": data}])
    assert response.status_code == 200, response.text
    page = response.json()["items"][0]["page"]
    assert page["width"] == 14400 and page["width_px"] * page["height_px"] <= MAX_PAGE_PIXELS
    assert page["width_px"] >= 499  # the bound used, not far below it


def test_javascript_forms_links_and_file_references_are_inert(monkeypatch, tmp_path):
    import pypdfium2

    def refuse(*args, **kwargs):
        raise AssertionError("forms were initialised")

    monkeypatch.setattr(pypdfium2.PdfDocument, "init_forms", refuse)
    # this pdfium has no JavaScript engine (nor XFA); one that had would run scripts only through
    # the form-fill environment, which SIE never creates
    assert not {"V8", "XFA"} & set(pypdfium2.PDFIUM_INFO.flags)
    scripted = javascript_form_pdf()
    (page,) = plan_document(DocumentItem(scripted, None, 72), Limits(), "d", 0)
    # only the content stream's black square is drawn: no widget, no script, no link followed
    assert np.array_equal(np.asarray(page.picture("d")), np.asarray(reference_render(scripted, 1, 1.0)))
    assert np.asarray(page.picture("d")).mean() == pytest.approx(255 * 0.75)
    black = tmp_path / "black.raw"
    black.write_bytes(b"\x00")
    (external,) = plan_document(DocumentItem(external_file_pdf(str(black)), None, 72), Limits(), "d", 0)
    assert np.asarray(external.picture("d")).min() == 255  # the image's external file was not read


def test_a_compression_bomb_costs_only_its_rendered_pixels(server):
    data = image_bomb_pdf(10000)  # 100 MB of image data in ~440 KB; rendering it peaks at ~50 MB RSS
    started = time.monotonic()
    response = encode_msgpack(server, [{"document": data}])
    assert response.status_code == 200, response.text
    assert time.monotonic() - started < 20
    assert response.json()["items"][0]["page"]["width_px"] == 400


def test_admission_counts_a_document_as_its_pages():
    document = {"document": b"%PDF-"}
    assert upper_bound_tokens({"items": [document]}, 77, image_tokens=5, document_pages=64) == 5 * 64
    text_alone = upper_bound_tokens({"items": ["ab"]}, 77, image_tokens=5, document_pages=64)
    assert upper_bound_tokens({"items": [{**document, "pages": [1, 2]}, "ab"]}, 77, image_tokens=5,
                              document_pages=64) == 2 * 5 + text_alone


def test_openapi_documents_the_document_item_and_the_page_answer(server, document):
    import jsonschema

    spec = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    operation = spec["paths"]["/v1/encode/{model}"]["post"]
    request_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    answer_schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    body = {"items": [{"document": base64.b64encode(document).decode(), "pages": [2], "dpi": 72}, "x"]}
    answer = encode_json(server, body["items"]).json()
    for schema, value in ((request_schema, body), (answer_schema, answer)):
        jsonschema.validate(value, {**schema, "components": spec["components"]}, cls=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.ValidationError):  # the page's shape is documented, not free-form
        broken = {**answer, "items": [{**answer["items"][0], "page": {"number": "two"}}]}
        jsonschema.validate(broken, {**answer_schema, "components": spec["components"]},
                            cls=jsonschema.Draft202012Validator)


def test_the_inflation_bound_sees_a_content_bomb_behind_an_image_or_disguised_as_one():
    from pdf_fixtures import hand_written_pdf, stream
    from sie_engine.errors import PayloadTooLarge
    from sie_engine.pdf_inflation import check_inflation

    bomb = content_bomb_pdf(5)
    content = bomb[bomb.index(b"4 0 obj\n") + 8:bomb.index(b"\nendobj\n", bomb.index(b"4 0 obj\n"))]
    image = stream(b"/Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceGray "
                   b"/BitsPerComponent 8 /Filter /FlateDecode", zlib.compress(b"\x00"))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 5 0 R >>", image, content]
    with pytest.raises(PayloadTooLarge, match="inflate to more than"):
        check_inflation(hand_written_pdf(objects), 4 * 2**20, "d")
    # the page's content calling itself an image: pdfium parses it as content all the same
    disguised = content.replace(b"<< /Filter", b"<< /Subtype /Image /Width 1 /Height 1 /Filter", 1)
    assert disguised != content
    with pytest.raises(PayloadTooLarge, match="inflate to more than"):
        check_inflation(hand_written_pdf(objects[:4] + [disguised]), 4 * 2**20, "d")
    assert check_inflation(image_bomb_pdf(), 4 * 2**20, "d") == 0  # images are streamed by pdfium: not counted
