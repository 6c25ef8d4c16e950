"""Image preprocessing bombs on a real `sie-server` with tiny random CLIP and SigLIP models
(issue #30.4): an image whose header is small but whose resize is not (CLIP scales the long
side by as much as the short one: a 102-byte 1 x 10,000 PNG cost 15-24 s and +4-5 GB) is
refused fast with a 413 saying why, while SigLIP (a fixed-size resize) embeds it as
transformers does; and image decoding runs on threads of its own, so a text request to
another model answers promptly while large image requests are being decoded."""

from __future__ import annotations

import base64
import threading
import time

import httpx
import numpy as np
import pytest

from image_fixtures import assert_cosine, make_tiny_clip, make_tiny_siglip, png_bomb, reference_features
from server_fixtures import peak_rss, start_server
from tiny_models import make_tiny_bert

MiB = 2**20


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("bomb-models")
    return {"clip": make_tiny_clip(root / "clip"), "siglip": make_tiny_siglip(root / "siglip"),
            "enc": make_tiny_bert(root / "enc", seed=3)}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    process = start_server(*[a for name in ("clip", "siglip", "enc") for a in ("--model", f"{name}={models[name]}")],
                           "--no-builtin", "--device", "cpu", "--preload", "clip", "--preload", "siglip",
                           "--preload", "enc", log_dir=tmp_path_factory.mktemp("bomb-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def image_item(data: bytes) -> dict:
    return {"image": base64.b64encode(data).decode()}


@pytest.mark.parametrize("height", [10_000, 100_000])
def test_a_thin_strip_is_refused_before_clip_resizes_it(server, http, height):
    strip = png_bomb(1, height)
    assert len(strip) < 2000  # a small file: the header says 1 x height
    baseline = peak_rss(server.pid)
    started = time.monotonic()
    answer = http.post("/v1/encode/clip", json={"items": [image_item(strip)]})
    elapsed = time.monotonic() - started
    assert answer.status_code == 413, answer.text
    message = answer.json()["error"]["message"]
    assert "would resize it to" in message and "aspect ratio" in message, message
    assert answer.json()["error"]["field"] == "items[0].image"
    assert elapsed < 2.0, f"the refusal took {elapsed:.1f}s"
    assert peak_rss(server.pid) - baseline < 100 * MiB
    assert http.post("/v1/encode/clip", json={"items": ["still serving"]}).status_code == 200


def test_siglip_embeds_the_strip_as_transformers_does(models, http):
    strip = png_bomb(1, 10_000)
    answer = http.post("/v1/encode/siglip", json={"items": [image_item(strip)]})
    assert answer.status_code == 200, answer.text
    ours = np.array([answer.json()["items"][0]["dense"]], dtype=np.float32)
    reference = reference_features("siglip", models["siglip"], [strip], ["x"])[:1]  # its texts must not be empty
    assert_cosine(ours, reference)


def test_a_text_request_is_not_held_behind_image_decoding(server, http):
    big = png_bomb(4000, 4000)  # 16M pixels each, decoded and resized to 32 x 32
    body = {"items": [image_item(big) for _ in range(20)]}
    outcomes: list[int] = []

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            outcomes.append(client.post("/v1/encode/clip", json=body).status_code)

    senders = [threading.Thread(target=send) for _ in range(3)]
    for sender in senders:
        sender.start()
    try:
        time.sleep(1.0)  # the image requests are being decoded
        assert len(outcomes) == 0, "the image requests finished before the text request was sent"
        started = time.monotonic()
        answer = http.post("/v1/encode/enc", json={"items": ["a short text to another model"]})
        waited = time.monotonic() - started
    finally:
        for sender in senders:
            sender.join()
    assert answer.status_code == 200, answer.text
    assert outcomes == [200, 200, 200]
    assert waited < 1.5, f"the text request waited {waited:.1f}s behind image decoding"
