"""Grounding DINO over HTTP: a real `sie-server serve` with a tiny random Grounding DINO served from
its directory (`--model NAME=PATH`), images of several sizes and a PDF's pages through
`POST /v1/extract` with labels and a threshold (JSON with base64, and msgpack with raw bytes
through SIEClient), each image's regions equal to transformers' `GroundingDinoForObjectDetection`
and `GroundingDinoProcessor.post_process_grounded_object_detection` on the same weights (boxes in
the image's pixels, labels decoded from the prompt's tokens); requests it cannot serve refused
with a 400 naming the field."""

from __future__ import annotations

import base64
import io

import httpx
import msgpack
import numpy as np
import pytest
import torch
from PIL import Image

from grounding_dino_fixtures import make_tiny_grounding_dino, reference_grounding_dino
from image_fixtures import sample_images
from pdf_fixtures import make_pdf, reference_render
from server_fixtures import start_server
from sie_client import SIEClient

LABELS = ["a cat", "the dog", "x"]
NAMES = ["png_rgb", "jpeg_rgb", "webp_rgb", "png_gray"]  # 64 x 48, 100 x 75, 33 x 90, 50 x 50


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_grounding_dino(tmp_path_factory.mktemp("gdino") / "gdino")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    process = start_server("--model", f"gdino={model_dir}", "--preload", "gdino",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def reference(model_dir):
    return reference_grounding_dino(model_dir)


def reference_outputs(reference, pictures):
    """transformers' raw outputs, each picture alone (its batches pad the pictures to one size)."""
    model, processor = reference
    out = []
    for picture in pictures:
        inputs = processor(images=picture, text=[LABELS], return_tensors="pt")
        with torch.no_grad():
            out.append((inputs, model(**inputs)))
    return out


def reference_regions(reference, pictures, outputs, threshold: float) -> list[list[tuple]]:
    _, processor = reference
    found = []
    for picture, (inputs, out) in zip(pictures, outputs):
        image = processor.post_process_grounded_object_detection(out, inputs["input_ids"], threshold=threshold,
                                                                 target_sizes=[(picture.height, picture.width)])[0]
        found.append([(label, float(score), box.tolist()) for label, score, box in
                      zip(image["text_labels"], image["scores"], image["boxes"])])
    return found


@pytest.fixture(scope="module")
def expected(reference):
    """(threshold, transformers' regions per image) at a threshold that keeps some boxes and drops others."""
    # the files the server decodes (JPEG and WebP are lossy: not the pictures before encoding)
    pictures = [Image.open(io.BytesIO(sample_images()[name])).convert("RGB") for name in NAMES]
    outputs = reference_outputs(reference, pictures)
    scores = torch.cat([out.logits[0].sigmoid().max(-1).values for _, out in outputs])
    threshold = float(scores.median())
    found = reference_regions(reference, pictures, outputs, threshold)
    assert 0 < sum(len(regions) for regions in found) < scores.numel()
    return threshold, found


def assert_regions(answered: list[list[tuple]], expected: list[list[tuple]]) -> None:
    for ours, theirs in zip(answered, expected, strict=True):
        assert [label for label, _, _ in ours] == [label for label, _, _ in theirs]
        np.testing.assert_allclose([s for _, s, _ in ours], [s for _, s, _ in theirs], atol=1e-5)
        np.testing.assert_allclose(np.reshape([b for _, _, b in ours], (-1, 4)),
                                   np.reshape([b for _, _, b in theirs], (-1, 4)), atol=1e-3)


def test_json_regions_equal_transformers(server, expected):
    threshold, regions = expected
    images = sample_images()
    items = [{"id": name, "image": base64.b64encode(images[name]).decode()} for name in NAMES]
    response = httpx.post(f"{server.url}/v1/extract/gdino", json={"items": items, "labels": LABELS,
                                                                  "threshold": threshold}, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["id"] for item in answer["items"]] == NAMES
    assert all(set(region) == {"label", "score", "box"} for item in answer["items"] for region in item["regions"])
    assert_regions([[(r["label"], r["score"], r["box"]) for r in item["regions"]] for item in answer["items"]],
                   regions)
    assert answer["usage"]["tokens"] > 0


def test_client_msgpack_raw_bytes_equal_transformers(server, expected):
    threshold, regions = expected
    images = sample_images()
    with SIEClient(server.url, encoding="msgpack") as client:
        result = client.extract("gdino", [images[name] for name in NAMES], LABELS, threshold=threshold)
    assert_regions([[(r.label, r.score, r.box) for r in item.regions or []] for item in result.items], regions)


def test_text_threshold_picks_the_labels_words_as_transformers(server, reference):
    """A higher text threshold keeps fewer of the prompt's words in each region's label."""
    pictures = [Image.open(io.BytesIO(sample_images()[name])).convert("RGB") for name in NAMES[:2]]
    outputs = reference_outputs(reference, pictures)
    _, processor = reference
    images = sample_images()
    with SIEClient(server.url) as client:
        result = client.extract("gdino", [images[name] for name in NAMES[:2]], LABELS, threshold=0.0,
                                text_threshold=0.9)
    theirs = [processor.post_process_grounded_object_detection(out, inputs["input_ids"], threshold=0.0,
                                                               text_threshold=0.9,
                                                               target_sizes=[(p.height, p.width)])[0]["text_labels"]
              for p, (inputs, out) in zip(pictures, outputs)]
    assert [[r.label for r in item.regions or []] for item in result.items] == theirs
    with SIEClient(server.url) as client:
        default = client.extract("gdino", [images[name] for name in NAMES[:2]], LABELS, threshold=0.0)
    assert [[r.label for r in item.regions or []] for item in default.items] != theirs


def test_a_pdf_answers_per_page_as_transformers_on_the_rendered_pages(server, reference):
    """Each page of a document item is an item of its own, with its page; its regions are those of
    transformers on pypdfium2's rendering of the page, in the page's pixels; without a threshold,
    transformers' default (0.25) applies."""
    pdf = make_pdf([(60, 80), (90, 50)], seed=3)
    body = {"items": [{"id": "doc", "document": base64.b64encode(pdf).decode(), "dpi": 72}], "labels": LABELS}
    response = httpx.post(f"{server.url}/v1/extract/gdino", json=body, timeout=120)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [(item["id"], item["page"]["number"], item["page"]["width_px"]) for item in items] == [
        ("doc", 1, 60), ("doc", 2, 90)]
    pages = [reference_render(pdf, n, 1.0) for n in (1, 2)]  # 72 dpi: one pixel per point
    regions = reference_regions(reference, pages, reference_outputs(reference, pages), 0.25)
    assert sum(len(r) for r in regions) > 0
    assert_regions([[(r["label"], r["score"], r["box"]) for r in item["regions"]] for item in items], regions)


@pytest.mark.parametrize("body, field, fragment", [
    ({"items": ["a text"], "labels": ["cat"]}, "items[0]", "is a text"),
    ({"items": [{"image": "IMG"}]}, "labels", "labels is required"),
    ({"items": [{"image": "IMG"}], "labels": ["cat"], "flat": True}, "flat", "open-vocabulary detector"),
    ({"items": [{"image": "IMG"}], "labels": ["cat. dog"]}, "labels[0]", "separates labels with '.'"),
    ({"items": [{"image": "IMG"}], "labels": [f"big red cat number {i}" for i in range(50)]}, "labels",
     "longer than the model's"),
    ({"items": [{"image": "IMG", "text": "a cat"}], "labels": ["cat"]}, "items[0]", "both text and image"),
    ({"items": [{"image": "IMG"}], "labels": ["cat"], "threshold": 2}, "threshold", ""),
    ({"items": [{"image": "IMG"}], "labels": ["cat"], "text_threshold": -1}, "text_threshold", ""),
])
def test_what_it_cannot_serve_is_a_400_naming_the_field(server, body, field, fragment):
    png = base64.b64encode(sample_images()["png_rgb"]).decode()
    items = [{**item, "image": png} if isinstance(item, dict) and "image" in item else item for item in body["items"]]
    response = httpx.post(f"{server.url}/v1/extract/gdino", json={**body, "items": items}, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in error["message"] and fragment in error["message"]


def test_a_sliver_image_is_a_400_naming_it(server):
    """A 1 x 2000 picture: the processor's resize would make its short side 0 pixels."""
    from image_fixtures import encode_image

    sliver = base64.b64encode(encode_image(Image.new("RGB", (1, 2000), "white"), "PNG")).decode()
    response = httpx.post(f"{server.url}/v1/extract/gdino", json={"items": [{"image": sliver}], "labels": LABELS},
                          timeout=60)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "items[0].image" in message and "aspect ratio" in message


def test_a_broken_image_is_a_4xx_and_the_server_keeps_serving(server):
    png = sample_images()["png_rgb"]
    body = msgpack.packb({"items": [{"image": png}, {"image": png[:len(png) // 2]}], "labels": LABELS},
                         use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/extract/gdino", content=body,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/json"}, timeout=60)
    assert response.status_code == 400, response.text
    assert "items[1].image" in response.json()["error"]["message"]
    follow_up = httpx.post(f"{server.url}/v1/extract/gdino", json={"items": [{"image": base64.b64encode(
        png).decode()}], "labels": LABELS}, timeout=60)
    assert follow_up.status_code == 200, follow_up.text
