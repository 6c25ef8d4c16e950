"""Open-vocabulary detection over HTTP: a real `sie-server serve` with a tiny random OWLv2 served
from its directory (`--model NAME=PATH`), images of several sizes through `POST /v1/extract` with
labels and a threshold (JSON with base64, msgpack with raw bytes, and through SIEClient), each
image's regions equal to transformers' `Owlv2ForObjectDetection` and
`Owlv2Processor.post_process_grounded_object_detection` on the same weights (boxes in the image's
pixels); requests a detector cannot serve refused with a 400 naming the field."""

from __future__ import annotations

import base64
import io

import httpx
import msgpack
import numpy as np
import pytest
import torch
from PIL import Image

from image_fixtures import sample_images
from owlv2_fixtures import make_tiny_owlv2, reference_detector
from server_fixtures import start_server
from sie_client import SIEClient

LABELS = ["a cat", "the dog", "x"]
NAMES = ["png_rgb", "jpeg_rgb", "webp_rgb", "png_gray"]  # 64 x 48, 100 x 75, 33 x 90, 50 x 50
THRESHOLD = 0.55  # the tiny model's scores spread around 0.5: some boxes kept, some dropped


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_owlv2(tmp_path_factory.mktemp("owlv2") / "owlv2")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    process = start_server("--model", f"owl={model_dir}", "--preload", "owl",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def expected(model_dir):
    """transformers' regions per image: [(label, score, box)] in patch order."""
    model, processor = reference_detector(model_dir)
    # the files the server decodes (JPEG and WebP are lossy: not the pictures before encoding)
    pictures = [Image.open(io.BytesIO(sample_images()[name])).convert("RGB") for name in NAMES]
    inputs = processor(text=[LABELS] * len(pictures), images=pictures, return_tensors="pt")
    with torch.no_grad():
        outputs = model(**inputs)
    found = processor.post_process_grounded_object_detection(
        outputs, threshold=THRESHOLD, target_sizes=[(p.height, p.width) for p in pictures],
        text_labels=[LABELS] * len(pictures))
    return [[(label, float(score), box.tolist()) for label, score, box in
             zip(image["text_labels"], image["scores"], image["boxes"])] for image in found]


def assert_regions(answered: list[list[tuple]], expected: list[list[tuple]]) -> None:
    assert sum(len(regions) for regions in expected) > 0  # the threshold keeps some boxes...
    assert sum(len(regions) for regions in expected) < len(NAMES) * 16  # ...and drops others
    for ours, theirs in zip(answered, expected, strict=True):
        assert [label for label, _, _ in ours] == [label for label, _, _ in theirs]
        np.testing.assert_allclose([s for _, s, _ in ours], [s for _, s, _ in theirs], atol=1e-5)
        np.testing.assert_allclose(np.reshape([b for _, _, b in ours], (-1, 4)),
                                   np.reshape([b for _, _, b in theirs], (-1, 4)), atol=1e-3)


def test_json_regions_equal_transformers(server, expected):
    images = sample_images()
    items = [{"id": name, "image": base64.b64encode(images[name]).decode()} for name in NAMES]
    response = httpx.post(f"{server.url}/v1/extract/owl", json={"items": items, "labels": LABELS,
                                                                "threshold": THRESHOLD}, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["id"] for item in answer["items"]] == NAMES
    assert all(set(region) == {"label", "score", "box"} for item in answer["items"] for region in item["regions"])
    assert_regions([[(r["label"], r["score"], r["box"]) for r in item["regions"]] for item in answer["items"]],
                   expected)
    assert answer["usage"]["tokens"] > 0


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_client_regions_equal_transformers(server, expected, encoding):
    images = sample_images()
    with SIEClient(server.url, encoding=encoding) as client:
        result = client.extract("owl", [images[name] for name in NAMES], LABELS, threshold=THRESHOLD)
    assert_regions([[(r.label, r.score, r.box) for r in item.regions or []] for item in result.items], expected)


def test_msgpack_raw_bytes_and_default_threshold(server):
    """Raw image bytes in msgpack; without a threshold, transformers' default (0.1) applies."""
    body = msgpack.packb({"items": [{"image": sample_images()["png_rgb"]}], "labels": LABELS}, use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/extract/owl", content=body,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
                          timeout=60)
    assert response.status_code == 200, response.text
    regions = msgpack.unpackb(response.content, raw=False)["items"][0]["regions"]
    assert regions and all(region["score"] > 0.1 for region in regions)


@pytest.mark.parametrize("body, field, fragment", [
    ({"items": ["a text"], "labels": ["cat"]}, "items[0]", "is a text"),
    ({"items": [{"image": "IMG"}]}, "labels", "labels is required"),
    ({"items": [{"image": "IMG"}], "labels": ["cat"], "flat": True}, "flat", "open-vocabulary detector"),
    ({"items": [{"image": "IMG"}], "labels": ["cat " * 40]}, "labels[0]", "longer than the model's text window"),
    ({"items": [{"image": "IMG", "text": "a cat"}], "labels": ["cat"]}, "items[0]", "both text and image"),
    ({"items": [{"image": "IMG"}], "labels": ["cat"], "threshold": 2}, "threshold", ""),
    ({"items": [{"image": "IMG"}], "labels": ["cat"], "text_threshold": 0.3}, "text_threshold", "does not apply"),
])
def test_what_a_detector_cannot_serve_is_a_400_naming_the_field(server, body, field, fragment):
    png = base64.b64encode(sample_images()["png_rgb"]).decode()
    items = [{**item, "image": png} if isinstance(item, dict) and "image" in item else item for item in body["items"]]
    response = httpx.post(f"{server.url}/v1/extract/owl", json={**body, "items": items}, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in error["message"] and fragment in error["message"]


def test_a_broken_image_is_a_4xx_and_the_server_keeps_serving(server):
    """(The image limits are images.py's, shared with encode: tests/server/test_images_http.py.)"""
    png = sample_images()["png_rgb"]
    body = msgpack.packb({"items": [{"image": png}, {"image": png[:len(png) // 2]}], "labels": LABELS},
                         use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/extract/owl", content=body,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/json"}, timeout=60)
    assert response.status_code == 400, response.text
    assert "items[1].image" in response.json()["error"]["message"]
    follow_up = httpx.post(f"{server.url}/v1/extract/owl", json={"items": [{"image": base64.b64encode(
        sample_images()["png_rgb"]).decode()}], "labels": LABELS}, timeout=60)
    assert follow_up.status_code == 200, follow_up.text
