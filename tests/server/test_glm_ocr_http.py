"""GLM-OCR through `POST /v1/extract` on a real `sie-server serve`: the built-in zai-org/GLM-OCR card on a
tiny random GLM-OCR (tests/helpers/glm_ocr_fixtures.py, float32), and the same directory served
card-less (`--model`). Every page's text equals transformers' chat template + Glm46VProcessor +
`generate` + `decode(skip_special_tokens=True)` on the page alone, for each task's prompt; JSON and
msgpack answers equal the embedded engine's; pages of other sizes in one request share the running
decode batch; a PDF answers per page; bad input is a 400 naming the field."""

from __future__ import annotations

import base64

import httpx
import pytest
from PIL import Image

from glm_ocr_fixtures import tiny_glm_ocr
from image_fixtures import encode_image, noise_page
from page_vlm_checks import (
    ReferenceTexts,
    check_msgpack_equals_json,
    check_pages_answered_as_alone,
    images_json,
    served,
    tiny_card,
)
from pdf_fixtures import make_pdf, reference_render
from sie_client import SIEClient
from sie_engine import Catalog, Engine
from sie_engine.card import ModelCard
from sie_engine.models.glm_ocr.tasks import PROMPTS

MODEL = "zai-org/GLM-OCR"
LOCAL = "tiny/glm-ocr"  # the same directory without a card: the family's local card
NEW = 10  # the test card's max_new_tokens bound (and default)
POSITIONS = 512  # the tiny decoder's positions


# each resizes to its own patch grid: wide, tall, small (scaled up to the minimum pixels)
PAGES = [noise_page(45, 27, 0), noise_page(24, 40, 1), noise_page(12, 10, 2)]
PNGS = [encode_image(p, "PNG") for p in PAGES]


def _card(root) -> ModelCard:
    return tiny_card(MODEL, root, NEW, POSITIONS)


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-glm-ocr")
    model, processor = tiny_glm_ocr(root)
    return root, model, processor, ReferenceTexts(model, processor)


@pytest.fixture(scope="module")
def server(glm, tmp_path_factory):
    with served(_card(glm[0]), LOCAL, glm[0], tmp_path_factory) as process:
        yield process


def reference(glm, page: Image.Image, text: str, new: int = NEW) -> str:
    """The model card's transformers usage on the page alone (page_vlm_checks.ReferenceTexts)."""
    return glm[3](page, text, new)


def test_pages_of_three_sizes_equal_transformers_each_alone(server, glm):
    check_pages_answered_as_alone(server.url, MODEL, PNGS, [reference(glm, p, PROMPTS["text"]) for p in PAGES])


def test_tasks_over_msgpack_equal_json_and_the_engine(server, glm):
    expected = [reference(glm, p, PROMPTS["table"], new=6) for p in PAGES[:2]]
    check_msgpack_equals_json(server.url, MODEL, PNGS[:2], {"task": "table", "max_new_tokens": 6}, expected)

    custom = "Extract the total as JSON: {\"total\": \"\"}"
    with Engine(Catalog([_card(glm[0])]), device="cpu") as engine, \
            SIEClient(engine=engine) as embedded:
        table = embedded.extract(MODEL, PNGS[:2], task="table", max_new_tokens=6)
        own = embedded.extract(MODEL, [PNGS[2]], task="custom", prompt=custom)
    assert [item.text for item in table.items] == expected
    over_http = httpx.post(f"{server.url}/v1/extract/{MODEL}", timeout=60,
                           json={"items": images_json(PNGS[2:]), "task": "custom", "prompt": custom}).json()["items"]
    assert [item["text"] for item in over_http] == [item.text for item in own.items] == [
        reference(glm, PAGES[2], custom)]


def test_a_pdf_answers_per_page_and_the_local_card(server, glm):
    pdf = make_pdf([(40, 56), (64, 32)], seed=4)
    body = {"items": [{"id": "doc", "document": base64.b64encode(pdf).decode(), "dpi": 72}], "task": "formula"}
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [(item["id"], item["page"]["number"]) for item in items] == [("doc", 1), ("doc", 2)]
    rendered = [reference_render(pdf, n, 1.0) for n in (1, 2)]  # 72 dpi: one pixel per point
    assert [item["text"] for item in items] == [reference(glm, p, PROMPTS["formula"]) for p in rendered]

    local = httpx.post(f"{server.url}/v1/extract/{LOCAL}", json={"items": images_json(PNGS[:1]), "max_new_tokens": 5},
                       timeout=60)
    assert local.status_code == 200, local.text
    assert [item["text"] for item in local.json()["items"]] == [reference(glm, PAGES[0], PROMPTS["text"], new=5)]


@pytest.mark.parametrize("body, field, says", [
    ({"task": "caption"}, "task", "send task as one of text, formula, table, custom"),
    ({"task": "table", "prompt": "read it"}, "prompt", "send prompt only with task custom"),
    ({"task": "custom"}, "prompt", "needs the prompt to send with the page"),
    ({"max_new_tokens": NEW + 1}, "max_new_tokens", f"at most {NEW}"),
    ({"labels": ["total"]}, "labels", "labels"),
])
def test_bad_requests_are_400s_naming_the_field(server, body, field, says):
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", json={"items": images_json(PNGS[:1]), **body}, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert says in error["message"] and field in error["message"]


def test_a_text_item_is_a_400(server):
    response = httpx.post(f"{server.url}/v1/extract/{MODEL}", json={"items": [{"text": "hello"}]}, timeout=30)
    assert response.status_code == 400
    assert "reads page images" in response.json()["error"]["message"]
