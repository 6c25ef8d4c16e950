"""Image items over HTTP: a real `sie-server serve` with a tiny random CLIP and SigLIP served
from local directories (`--model NAME=PATH`), images of several sizes and formats mixed with
texts in one request (JSON with base64, msgpack with raw bytes, and through SIEClient), each
vector equal to transformers' `get_image_features` / `get_text_features` on the same weights;
hostile images refused with a 4xx while the server goes on serving."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import httpx
import msgpack
import numpy as np
import pytest

from image_fixtures import (
    assert_cosine,
    hostile_images,
    make_tiny_clip,
    make_tiny_siglip,
    reference_features,
    sample_images,
    sample_pil_images,
)
from server_fixtures import start_server
from sie_client import SIEClient

TEXTS = ["the cat", "a dog on the grass", "x", "the the the cat sat on the mat with a dog"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("image-models")
    return {"clip": make_tiny_clip(root / "clip"), "siglip": make_tiny_siglip(root / "siglip")}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    process = start_server("--model", f"clip={models['clip']}", "--model", f"siglip={models['siglip']}",
                           "--preload", "clip", "--max-image-pixels", "4000000",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()






def mixed_items(as_json: bool) -> list[dict]:
    """Images (base64, one as a data: URI, for JSON; raw bytes for msgpack) interleaved with texts."""
    items: list[dict] = []
    for i, data in enumerate(sample_images().values()):
        if as_json:
            encoded = base64.b64encode(data).decode()
            items.append({"image": f"data:image/x;base64,{encoded}" if i == 0 else encoded})
        else:
            items.append({"image": data})
    return items + [{"text": t} for t in TEXTS]


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_images_and_texts_in_one_json_request_equal_transformers(server, models, kind):
    response = httpx.post(f"{server.url}/v1/encode/{kind}", json={"items": mixed_items(True), "normalize": False},
                          timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    ours = np.array([item["dense"] for item in answer["items"]], dtype=np.float32)
    assert_cosine(ours, reference_features(kind, models[kind], list(sample_images().values()), TEXTS))
    assert [item["id"] for item in answer["items"]] == [str(i) for i in range(len(ours))]


def test_msgpack_carries_raw_image_bytes(server, models):
    body = msgpack.packb({"items": mixed_items(False), "normalize": False}, use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/encode/clip", content=body,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
                          timeout=60)
    assert response.status_code == 200, response.text
    answer = msgpack.unpackb(response.content, raw=False)
    vectors = [np.frombuffer(item["dense"]["data"], dtype="<f4") for item in answer["items"]]
    assert_cosine(np.stack(vectors), reference_features("clip", models["clip"], list(sample_images().values()), TEXTS))


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_client_takes_bytes_paths_and_pil_images(server, models, tmp_path, encoding):
    images = sample_images()
    path = tmp_path / "picture.webp"
    path.write_bytes(images["webp_rgb"])
    pil = sample_pil_images()["png_gray"]
    items = [images["png_rgb"], {"id": "p", "image": path}, {"image": pil}, "the cat", {"text": "x"}]
    with SIEClient(server.url, encoding=encoding) as client:
        result = client.encode("clip", items, normalize=False)
    ours = np.stack([item.dense for item in result.items])
    png_gray = io.BytesIO()
    pil.save(png_gray, format="PNG")
    ref = reference_features("clip", models["clip"], [images["png_rgb"], images["webp_rgb"], png_gray.getvalue()],
                    ["the cat", "x"])
    assert_cosine(ours, ref)
    assert result.items[1].id == "p"


def test_text_only_model_refuses_an_image_naming_its_modality(tmp_path_factory):
    from sie_engine import Catalog, Engine, card_from_local_dir
    from sie_engine.errors import InvalidRequest
    from tiny_models import make_tiny_bert

    path = make_tiny_bert(tmp_path_factory.mktemp("bert") / "bert")
    with Engine(Catalog([card_from_local_dir("bert", path)]), device="cpu") as engine:
        with pytest.raises(InvalidRequest, match="takes text items only"):
            engine.encode_sync("bert", ["fine", {"image": sample_images()["png_rgb"]}])


@pytest.mark.parametrize("name, status", [
    ("truncated_png", 400), ("huge_png", 413), ("text_bomb_png", 413), ("text_named_jpg", 400), ("empty", 400),
])
def test_hostile_images_get_a_4xx_and_the_server_keeps_serving(server, name, status):
    data = hostile_images()[name]
    body = msgpack.packb({"items": ["fine", {"image": data}]}, use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/encode/clip", content=body,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/json"}, timeout=60)
    assert response.status_code == status, response.text
    assert "items[1].image" in response.json()["error"]["message"]
    follow_up = httpx.post(f"{server.url}/v1/encode/clip", json={"items": [{"image": base64.b64encode(
        sample_images()["png_rgb"]).decode()}]}, timeout=60)
    assert follow_up.status_code == 200


@pytest.mark.parametrize("image, fragment", [
    ("not base64 at all!", "not valid base64"),
    ("https://example.com/cat.png", "does not fetch URLs"),
    (12, "must be bytes"),
])
def test_bad_image_values_in_json_are_400s(server, image, fragment):
    response = httpx.post(f"{server.url}/v1/encode/clip", json={"items": [{"image": image}]}, timeout=30)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]["message"]


def test_an_image_over_the_byte_limit_is_413(server):
    too_big = b"\x89PNG" + b"\x00" * (21 * 2**20)
    body = msgpack.packb({"items": [{"image": too_big}]}, use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/encode/clip", content=body,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/json"}, timeout=60)
    assert response.status_code == 413, response.text
    assert "per image" in response.json()["error"]["message"]


def test_models_list_the_modalities_and_image_size(server):
    entry = httpx.get(f"{server.url}/v1/models/clip", timeout=30).json()
    assert entry["modalities"] == ["text", "image"] and entry["image_size"] == 32
    with SIEClient(server.url) as client:
        assert client.model("siglip").modalities == ("text", "image")


def test_async_client_sends_images_over_msgpack(server, models):
    import asyncio

    from sie_client import AsyncSIEClient

    images = sample_images()

    async def encode():
        async with AsyncSIEClient(server.url, encoding="msgpack") as client:
            return await client.encode("siglip", [images["gif_palette"], "the cat"], normalize=False)

    result = asyncio.run(encode())
    ref = reference_features("siglip", models["siglip"], [images["gif_palette"]], ["the cat"])
    assert_cosine(np.stack([item.dense for item in result.items]), ref)
