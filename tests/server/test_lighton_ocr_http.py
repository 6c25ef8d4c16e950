"""LightOnOCR through `POST /v1/extract` on a real `sie-server serve`: the built-in
lightonai/LightOnOCR-2-1B card served on a tiny random LightOnOCR (tests/helpers/lighton_ocr_fixtures.py),
plus a beam-search card. Pages of three sizes in one request (one running decode batch), over JSON
and msgpack, equal transformers' processor + `generate` + `decode(skip_special_tokens=True)` on each
page alone, and equal the in-process engine's answers; a PDF answers per page; a page's answer is
its text only (no data, no regions); bad requests are 400s naming the field."""

from __future__ import annotations

import base64
import dataclasses
import io

import httpx
import msgpack
import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from lighton_ocr_fixtures import tiny_lighton_ocr, tiny_lighton_ocr_processor
from pdf_fixtures import make_pdf, reference_render
from server_fixtures import start_server
from sie_client import SIEClient
from sie_engine import Catalog, Engine, WeightsSource

CARD, BEAMS = "lightonai/LightOnOCR-2-1B", "tiny/lighton-ocr-beams"
NEW = 12  # the test cards' bound and default
EOS = [3, 40]  # <|im_end|> and a word the tiny decoder emits often: pages stop at different steps


def _page(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


PAGES = [_page(30, 50, 0), _page(70, 20, 1), _page(36, 36, 3)]  # tall and wide (resized), square (kept)
PNGS = [_png(p) for p in PAGES]


def _cards(root) -> list[dict]:
    """The built-in card on the tiny weights (its decoder's positions, a short bound, two stop tokens)
    and a beam-search variant."""
    card = dataclasses.replace(Catalog.builtin().get(CARD), weights=WeightsSource(path=str(root))).to_dict()
    generate = {"task_prompt": "{image}", "max_new_tokens": NEW, "generation": {"eos_token_id": EOS}}
    card = {**card, "max_seq_len": 256, "options": {"generate": generate}}  # the tiny decoder's positions
    beams = {**card, "id": BEAMS, "options": {"generate": {**generate, "generation": {"eos_token_id": EOS,
                                                                                       "num_beams": 2}}}}
    return [card, beams]


@pytest.fixture(scope="module")
def lighton(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-lighton-ocr")
    reference = tiny_lighton_ocr(root)
    processor = tiny_lighton_ocr_processor(root)
    cards = tmp_path_factory.mktemp("lighton-cards")
    for i, card in enumerate(_cards(root)):
        (cards / f"card{i}.yaml").write_text(yaml.safe_dump(card))
    return root, reference, processor, cards


@pytest.fixture(scope="module")
def server(lighton, tmp_path_factory):
    process = start_server("--models", str(lighton[3]), log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


_references: dict[tuple, str] = {}


def reference(lighton, page: Image.Image, beams: int = 1, new: int = NEW) -> str:
    """transformers on the page alone: the chat prompt, generate, the processor's decoding."""
    key = (page.tobytes(), page.size, beams, new)
    if key not in _references:
        _, model, processor, _ = lighton
        text = processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}]}],
                                             add_generation_prompt=True, tokenize=False)
        inputs = processor(images=[page], text=[text], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=new, num_beams=beams, do_sample=False, eos_token_id=EOS,
                                 pad_token_id=0)
        _references[key] = processor.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    return _references[key]


def test_pages_over_json_and_msgpack_equal_transformers_and_the_engine(server, lighton):
    body = {"items": [{"image": base64.b64encode(p).decode()} for p in PNGS]}
    response = httpx.post(f"{server.url}/v1/extract/{CARD}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    expected = [reference(lighton, p) for p in PAGES]
    assert [item["text"] for item in items] == expected
    assert sum(bool(t) for t in expected) >= 2  # words, not only special tokens
    assert all("data" not in item or item["data"] is None for item in items)
    assert all("regions" not in item for item in items)

    packed = msgpack.packb({"items": [{"image": p, "id": f"p{i}"} for i, p in enumerate(PNGS)]}, use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/extract/{CARD}", content=packed, timeout=60,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
    assert response.status_code == 200, response.text
    packed_items = msgpack.unpackb(response.content, raw=False)["items"]
    assert [item["text"] for item in packed_items] == expected
    assert [item["id"] for item in packed_items] == ["p0", "p1", "p2"]

    card = dataclasses.replace(Catalog.builtin().get(CARD), weights=WeightsSource(path=str(lighton[0])),
                               max_seq_len=256, options=_cards(lighton[0])[0]["options"])
    with Engine(Catalog([card]), device="cpu") as engine, SIEClient(engine=engine) as embedded:
        result = embedded.extract(CARD, PNGS)
    assert [item.text for item in result.items] == expected


def test_beam_card_and_a_pdf(server, lighton):
    body = {"items": [{"image": base64.b64encode(p).decode()} for p in PNGS[:2]]}
    beamed = httpx.post(f"{server.url}/v1/extract/{BEAMS}", json=body, timeout=60)
    assert beamed.status_code == 200, beamed.text
    assert [item["text"] for item in beamed.json()["items"]] == [reference(lighton, p, beams=2) for p in PAGES[:2]]

    pdf = make_pdf([(30, 40)], seed=4)
    body = {"items": [{"id": "doc", "document": base64.b64encode(pdf).decode(), "dpi": 72}], "max_new_tokens": 8}
    response = httpx.post(f"{server.url}/v1/extract/{CARD}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    (item,) = response.json()["items"]
    assert item["id"] == "doc" and item["page"]["number"] == 1
    rendered = reference_render(pdf, 1, 1.0)
    assert item["text"] == reference(lighton, rendered, new=8)


IMAGE = {"image": base64.b64encode(PNGS[0]).decode()}


@pytest.mark.parametrize("body, field, words", [
    ({"items": [IMAGE], "prompt": "read it"}, "prompt", "prompt does not apply"),
    ({"items": [IMAGE], "task": "<OCR>"}, "task", "task does not apply"),
    ({"items": [IMAGE], "max_new_tokens": NEW + 1}, "max_new_tokens", f"at most {NEW}"),
    ({"items": ["a text"]}, "items[0].text", "reads page images"),
    ({"items": [IMAGE], "labels": ["total"]}, "labels", "labels does not apply"),
])
def test_bad_requests_are_400s(server, body, field, words):
    response = httpx.post(f"{server.url}/v1/extract/{CARD}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error["message"] and error.get("field", field) == field, error
