"""Image preprocessing bombs on a real `sie-server` with tiny random CLIP and SigLIP models
(issue #30.4): an image whose header is small but whose resize is not (CLIP scales the long
side by as much as the short one: a 102-byte 1 x 10,000 PNG cost 15-24 s and +4-5 GB) is
refused fast with a 413 saying why, while SigLIP (a fixed-size resize) embeds it as
transformers does; image decoding is admitted by the pixels the headers declare, against the
wait bound, and runs on threads of its own, so a text request to another model answers
promptly while a flood of large image requests is decoded or refused."""

from __future__ import annotations

import base64
import io
import threading
import time

import httpx
import numpy as np
import pytest

from image_fixtures import assert_cosine, make_tiny_clip, make_tiny_siglip, png_bomb, reference_features
from server_fixtures import peak_rss, start_server
from tiny_models import make_tiny_bert

MiB = 2**20
# the wait bound, which image decoding is admitted by too; a flood of FLOOD requests of IMAGES
# large images each holds several times that much decoding
MAX_QUEUE_WAIT = 3
IMAGES, FLOOD = 12, 8


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("bomb-models")
    return {"clip": make_tiny_clip(root / "clip"), "siglip": make_tiny_siglip(root / "siglip"),
            "enc": make_tiny_bert(root / "enc", seed=3)}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    process = start_server(*[a for name in ("clip", "siglip", "enc") for a in ("--model", f"{name}={models[name]}")],
                           "--no-builtin", "--device", "cpu", "--preload", "clip", "--preload", "siglip",
                           "--preload", "enc", "--max-queue-wait", str(MAX_QUEUE_WAIT),
                           log_dir=tmp_path_factory.mktemp("bomb-server"))
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


def test_image_decoding_is_admitted_by_pixels_and_text_is_never_held_behind_it(server, http):
    big = png_bomb(2000, 2000)  # 4M pixels each in 4 KB of file, decoded and resized to 32 x 32
    body = {"items": [image_item(big) for _ in range(IMAGES)]}
    # a lone request measures the image threads' rate, so the bound below rests on a measure
    started = time.monotonic()
    assert http.post("/v1/encode/clip", json=body).status_code == 200
    lone_s = time.monotonic() - started
    outcomes: list[tuple[int, float, str | None]] = []

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            sent = time.monotonic()
            answer = client.post("/v1/encode/clip", json=body)
            outcomes.append((answer.status_code, time.monotonic() - sent, answer.headers.get("Retry-After")))

    senders = [threading.Thread(target=send) for _ in range(FLOOD)]
    for sender in senders:
        sender.start()
    try:
        time.sleep(0.5)  # the first image requests are being decoded
        started = time.monotonic()
        answer = http.post("/v1/encode/enc", json={"items": ["a short text to another model"]})
        waited = time.monotonic() - started
    finally:
        for sender in senders:
            sender.join()
    assert answer.status_code == 200, answer.text
    assert waited < 1.5, f"the text request waited {waited:.1f}s behind image decoding"
    admitted = [took for status, took, _ in outcomes if status == 200]
    refused = [(took, retry) for status, took, retry in outcomes if status == 429]
    assert len(admitted) + len(refused) == FLOOD, outcomes
    assert admitted and refused, outcomes  # before: all 8 admitted, the last answered after 8 requests' decoding
    assert all(took < 1.0 and retry is not None and int(retry) >= 1 for took, retry in refused), refused
    # what was admitted starts decoding within the bound: it ends within the bound plus its own decoding
    assert max(admitted) < MAX_QUEUE_WAIT + 2 * lone_s, (max(admitted), lone_s)


def test_header_pixels_reads_the_size_without_decoding():
    from PIL import Image

    from sie_engine.images import header_pixels
    from sie_engine.validation import Limits

    limits = Limits()
    photo = io.BytesIO()
    # a JPEG whose frame header follows 30 KB of EXIF: found in the second, longer prefix
    Image.new("RGB", (640, 480), (9, 99, 199)).save(photo, "JPEG", exif=b"Exif\x00\x00" + b"\x00" * 30_000)
    jpeg = photo.getvalue()
    assert header_pixels(jpeg, limits) == 640 * 480
    assert header_pixels("data:image/jpeg;base64," + base64.b64encode(jpeg).decode(), limits) == 640 * 480
    assert header_pixels(base64.b64encode(png_bomb(3000, 2000)).decode(), limits) == 6_000_000
    assert header_pixels(b"not an image at all", limits) == 0  # refused at once, costs nothing
    assert header_pixels(png_bomb(20_000, 20_000), limits) == 0  # over the pixel limit: refused from its header
    hidden = jpeg[:2] + b"\xff\xfe\xff\xfe" + b"\x00" * 0xfffc + jpeg[2:]  # a 64 KB comment first
    assert header_pixels(hidden, limits) == limits.max_image_pixels  # not found: charged the most an image may be
