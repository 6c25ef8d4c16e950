"""Idefics3 (granite-docling) through `POST /v1/extract` on a real `sie-server serve`: the built-in
ibm-granite/granite-docling-258M card on a tiny random Idefics3 (tests/helpers/idefics3_fixtures.py,
float32), and the same directory served card-less (`--model`). Every page's text equals the model
card's transformers usage on the page alone (the chat template over the page and "Convert this page
to docling.", Idefics3Processor, greedy `generate`, the new tokens without the stop token decoded
with the special tokens, left-stripped); JSON and msgpack answers equal the embedded engine's; pages
of other sizes (other grids of tiles) share the running decode batch; a PDF answers per page; bad
input is a 400 naming the field."""

from __future__ import annotations

import base64
import dataclasses

import httpx
import msgpack
import pytest
import torch
import yaml
from PIL import Image

from idefics3_fixtures import tiny_idefics3
from image_fixtures import encode_image, noise_page
from pdf_fixtures import make_pdf, reference_render
from server_fixtures import start_server
from sie_client import SIEClient
from sie_engine import Catalog, Engine, WeightsSource
from sie_engine.card import ModelCard
from sie_engine.models.idefics3.serving import DOCLING_PROMPT

MODEL = "ibm-granite/granite-docling-258M"
LOCAL = "tiny/idefics3"  # the same directory without a card: the family's local card
NEW = 10  # the test card's max_new_tokens bound (and default)
POSITIONS = 512  # the tiny decoder's positions

# (width, height): grids of 2 x 2, 1 x 2 and 2 x 1 tiles
PAGES = [noise_page(45, 40, 0), noise_page(70, 30, 1), noise_page(12, 30, 2)]
PNGS = [encode_image(p, "PNG") for p in PAGES]


def _card(root) -> ModelCard:
    """The built-in card on the tiny weights: float32 (transformers' reference runs in it), the tiny
    decoder's positions, a small bound of new tokens."""
    card = Catalog.builtin().get(MODEL)
    generate = {**card.options["generate"], "max_new_tokens": NEW}
    return dataclasses.replace(card, weights=WeightsSource(path=str(root)), dtype="float32", max_seq_len=POSITIONS,
                               max_batch_tokens=POSITIONS, options={**card.options, "generate": generate})


@pytest.fixture(scope="module")
def docling(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-idefics3")
    model, processor = tiny_idefics3(root)
    cards = tmp_path_factory.mktemp("idefics3-cards")
    (cards / "granite-docling.yaml").write_text(yaml.safe_dump(_card(root).to_dict()))
    return root, model, processor, cards


@pytest.fixture(scope="module")
def server(docling, tmp_path_factory):
    process = start_server("--models", str(docling[3]), "--model", f"{LOCAL}={docling[0]}",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


_references: dict[tuple, str] = {}


def reference(docling, page: Image.Image, new: int = NEW) -> str:
    """The model card's transformers usage on the page alone."""
    key = (page.tobytes(), page.size, new)
    if key not in _references:
        _, model, processor, _ = docling
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": DOCLING_PROMPT}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
        inputs = processor(text=[prompt], images=[[page.convert("RGB")]], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=new, do_sample=False)
        tokens = out[0, inputs["input_ids"].shape[1]:].tolist()
        if tokens and tokens[-1] in model.generation_config.eos_token_id:
            tokens = tokens[:-1]  # the stop token: SIE's text is the markup without it
        _references[key] = processor.batch_decode([tokens], skip_special_tokens=False)[0].lstrip()
    return _references[key]


def _images(pngs) -> list[dict]:
    return [{"image": base64.b64encode(p).decode()} for p in pngs]


def test_pages_of_three_grids_equal_transformers_each_alone(server, docling):
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", json={"items": _images(PNGS)}, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["id"] for item in answer["items"]] == ["0", "1", "2"]
    texts = [item["text"] for item in answer["items"]]
    assert texts == [reference(docling, p) for p in PAGES]
    assert all(texts) and len(set(texts)) > 1  # the pages are read apart, not one answer for all
    assert all(item.get("data") is None and "regions" not in item for item in answer["items"])
    assert answer["usage"]["tokens"] > 0


def test_msgpack_equals_json_and_the_engine(server, docling):
    body = {"items": [{"image": p, "id": f"p{i}"} for i, p in enumerate(PNGS[:2])], "max_new_tokens": 6}
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", content=msgpack.packb(body, use_bin_type=True),
                          timeout=60, headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
    assert response.status_code == 200, response.text
    items = msgpack.unpackb(response.content, raw=False)["items"]
    expected = [reference(docling, p, new=6) for p in PAGES[:2]]
    assert [item["text"] for item in items] == expected and [item["id"] for item in items] == ["p0", "p1"]
    as_json = httpx.post(f"{server.url}/v1/extract/{MODEL}", timeout=60,
                         json={**body, "items": [{"image": base64.b64encode(p).decode(), "id": f"p{i}"}
                                                 for i, p in enumerate(PNGS[:2])]}).json()["items"]
    assert as_json == items
    with Engine(Catalog([_card(docling[0])]), device="cpu") as engine, SIEClient(engine=engine) as embedded:
        own = embedded.extract(MODEL, PNGS[:2], max_new_tokens=6)
    assert [item.text for item in own.items] == expected


def test_a_pdf_answers_per_page_and_the_local_card(server, docling):
    pdf = make_pdf([(40, 56), (64, 32)], seed=4)
    body = {"items": [{"id": "doc", "document": base64.b64encode(pdf).decode(), "dpi": 72}]}
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [(item["id"], item["page"]["number"]) for item in items] == [("doc", 1), ("doc", 2)]
    rendered = [reference_render(pdf, n, 1.0) for n in (1, 2)]  # 72 dpi: one pixel per point
    assert [item["text"] for item in items] == [reference(docling, p) for p in rendered]

    local = httpx.post(f"{server.url}/v1/extract/{LOCAL}", json={"items": _images(PNGS[:1]), "max_new_tokens": 5},
                       timeout=60)
    assert local.status_code == 200, local.text
    assert [item["text"] for item in local.json()["items"]] == [reference(docling, PAGES[0], new=5)]


@pytest.mark.parametrize("body, field, says", [
    ({"prompt": "Convert this table to OTSL."}, "prompt", "send no prompt"),
    ({"task": "table"}, "task", "task does not apply"),
    ({"max_new_tokens": NEW + 1}, "max_new_tokens", f"at most {NEW}"),
    ({"labels": ["total"]}, "labels", "labels"),
])
def test_bad_requests_are_400s_naming_the_field(server, body, field, says):
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", json={"items": _images(PNGS[:1]), **body}, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert says in error["message"] and field in error["message"]


def test_a_text_item_is_a_400(server):
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", json={"items": [{"text": "hello"}]}, timeout=30)
    assert response.status_code == 400
    assert "reads page images" in response.json()["error"]["message"]
