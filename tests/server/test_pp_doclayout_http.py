"""PP-DocLayout over HTTP: a real `sie-server serve` with a tiny random PP-DocLayoutV3 served from its
directory (`--model NAME=PATH`), images and a one-page PDF through `POST /v1/extract` without
labels (JSON with base64, and msgpack with raw bytes through SIEClient), each image's regions equal
to transformers' `PPDocLayoutV3ForObjectDetection` and its `post_process_object_detection` on the
same weights and pixels (class names from id2label, boxes in the image's pixels, reading order);
requests it cannot serve refused with a 400 naming the field."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import pytest
import torch
from PIL import Image

from image_fixtures import sample_images
from pdf_fixtures import make_pdf, reference_render
from pp_doclayout_fixtures import LABELS, make_tiny_pp_doclayout, reference_post_processor
from server_fixtures import start_server
from sie_client import SIEClient
from sie_engine.models.pp_doclayout.inputs import LayoutImageProcessor

NAMES = ["png_rgb", "jpeg_rgb", "webp_rgb", "png_gray"]  # 64 x 48, 100 x 75, 33 x 90, 50 x 50
SIDE = 64


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_pp_doclayout(tmp_path_factory.mktemp("layout") / "layout", SIDE)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    process = start_server("--model", f"layout={model_dir}", "--preload", "layout",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def reference(model_dir):
    from transformers import PPDocLayoutV3ForObjectDetection

    return PPDocLayoutV3ForObjectDetection.from_pretrained(model_dir).eval()


def reference_regions(model, pictures, threshold: float) -> list[list[tuple]]:
    """transformers' model on the pictures' pixels, then its post-processing, each picture alone."""
    processor, post = LayoutImageProcessor({"size": {"height": SIDE, "width": SIDE}}), reference_post_processor(
        SIDE, SIDE)
    found = []
    for picture in pictures:
        pixels = torch.from_numpy(processor(images=[picture])["pixel_values"])
        with torch.no_grad():
            out = model(pixel_values=pixels)
        image = post.post_process_object_detection(out, threshold=threshold,
                                                   target_sizes=[(picture.height, picture.width)])[0]
        found.append([(LABELS[int(k)], float(s), b.tolist())
                      for s, k, b in zip(image["scores"], image["labels"], image["boxes"])])
    return found


@pytest.fixture(scope="module")
def expected(reference):
    """(threshold, transformers' regions per image) at a threshold that keeps some regions and drops others."""
    # the files the server decodes (JPEG and WebP are lossy: not the pictures before encoding)
    pictures = [Image.open(io.BytesIO(sample_images()[name])).convert("RGB") for name in NAMES]
    scores = [s for regions in reference_regions(reference, pictures, 0.0) for _, s, _ in regions]
    threshold = float(np.median(scores))
    found = reference_regions(reference, pictures, threshold)
    assert 0 < sum(len(regions) for regions in found) < len(scores)
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
    response = httpx.post(f"{server.url}/v1/extract/layout", json={"items": items, "threshold": threshold},
                          timeout=120)
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
        result = client.extract("layout", [images[name] for name in NAMES], threshold=threshold)
    assert_regions([[(r.label, r.score, r.box) for r in item.regions or []] for item in result.items], regions)


def test_without_a_threshold_transformers_default_applies(server, reference):
    images = sample_images()
    pictures = [Image.open(io.BytesIO(images[name])).convert("RGB") for name in NAMES]
    with SIEClient(server.url) as client:
        result = client.extract("layout", [images[name] for name in NAMES])
    assert_regions([[(r.label, r.score, r.box) for r in item.regions or []] for item in result.items],
                   reference_regions(reference, pictures, 0.5))


def test_a_threshold_keeps_the_regions_scoring_at_least_it(server, reference):
    images = sample_images()
    pictures = [Image.open(io.BytesIO(images[name])).convert("RGB") for name in NAMES[:2]]
    with SIEClient(server.url) as client:
        result = client.extract("layout", [images[name] for name in NAMES[:2]], threshold=0.0)
    theirs = reference_regions(reference, pictures, 0.0)
    assert sum(len(r) for r in theirs) == 12 * 2  # every query's best pairs: top-k is the query count
    assert_regions([[(r.label, r.score, r.box) for r in item.regions or []] for item in result.items], theirs)


def test_a_one_page_pdf_answers_its_page_as_transformers_on_the_rendered_page(server, reference):
    pdf = make_pdf([(60, 80)], seed=3)
    body = {"items": [{"id": "doc", "document": base64.b64encode(pdf).decode(), "dpi": 72}], "threshold": 0.0}
    response = httpx.post(f"{server.url}/v1/extract/layout", json=body, timeout=120)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [(item["id"], item["page"]["number"], item["page"]["width_px"]) for item in items] == [("doc", 1, 60)]
    regions = reference_regions(reference, [reference_render(pdf, 1, 1.0)], 0.0)  # 72 dpi: a pixel per point
    assert_regions([[(r["label"], r["score"], r["box"]) for r in item["regions"]] for item in items], regions)


@pytest.mark.parametrize("body, field, fragment", [
    ({"items": ["a text"]}, "items[0]", "is a text"),
    ({"items": [{"image": "IMG"}], "labels": ["text"]}, "labels", "layout model"),
    ({"items": [{"image": "IMG"}], "text_threshold": 0.5}, "text_threshold", "layout model"),
    ({"items": [{"image": "IMG"}], "threshold": 2}, "threshold", ""),
    ({"items": [{"image": "IMG", "text": "a cat"}]}, "items[0]", "both text and image"),
])
def test_what_it_cannot_serve_is_a_400_naming_the_field(server, body, field, fragment):
    png = base64.b64encode(sample_images()["png_rgb"]).decode()
    items = [{**item, "image": png} if isinstance(item, dict) and "image" in item else item for item in body["items"]]
    response = httpx.post(f"{server.url}/v1/extract/layout", json={**body, "items": items}, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in error["message"] and fragment in error["message"]


@pytest.mark.parametrize("route, body", [("tokenize", {"inputs": "a text"}), ("decode", {"ids": [1, 2]})])
def test_teis_tokenizer_routes_say_the_layout_model_has_no_tokenizer(server, route, body):
    response = httpx.post(f"{server.url}/tei/layout/{route}", json=body, timeout=60)
    assert response.status_code == 422, response.text
    assert "no fast (Rust) tokenizer" in response.json()["error"]
