"""ColQwen2 over HTTP: a real `sie-server serve` with a tiny random ColQwen2 served from its directory
(`--model NAME=PATH`), page images of four sizes and query texts through `POST /v1/encode` in JSON
(base64 images, lists of floats) and in msgpack (raw image bytes, tensor objects), each answer equal
to the in-process Engine's on the same directory (1e-6) and to transformers' ColQwen2ForRetrieval
(1e-5); `POST /v1/score` with page images equal to ColQwen2Processor.score_retrieval (1e-4); a
colpali-engine ColQwen2.5 LoRA adapter directory (vidore/colqwen2.5-v0.2's layout) served beside it,
its JSON scores equal to MaxSim over peft's merged model run as colpali-engine runs it; what it
cannot serve refused with a 400 naming the item."""

from __future__ import annotations

import base64

import httpx
import msgpack
import numpy as np
import pytest
from PIL import Image

from colqwen2_fixtures import (
    colpali_engine_queries,
    colqwen2_mrope_pages,
    colqwen2_reference,
    make_tiny_colpali_engine,
    make_tiny_colqwen2,
)
from image_fixtures import encode_image, sample_images
from server_fixtures import start_server
from sie_client.wire import loads
from sie_engine import Catalog, Engine, card_from_local_dir

PAGES = ["png_rgb", "jpeg_rgb", "webp_rgb", "png_gray"]
QUERIES = ["the cat", "x"]
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_colqwen2(tmp_path_factory.mktemp("colqwen2") / "colqwen2")


@pytest.fixture(scope="module")
def colpali_engine(tmp_path_factory):
    """(a colpali-engine ColQwen2.5 adapter directory, peft's merged model as ColQwen2ForRetrieval)."""
    _, adapter, merged = make_tiny_colpali_engine(tmp_path_factory.mktemp("colpali-engine"))
    return adapter, merged


@pytest.fixture(scope="module")
def server(model_dir, colpali_engine, tmp_path_factory):
    process = start_server("--model", f"colqwen2={model_dir}", "--model", f"colqwen25={colpali_engine[0]}",
                           "--preload", "colqwen2", log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def expected(model_dir):
    """(transformers' page and query vectors with score_retrieval's scores, the Engine's vectors)."""
    images = sample_images()
    reference = colqwen2_reference(model_dir, [images[name] for name in PAGES], QUERIES)
    with Engine(Catalog([card_from_local_dir("colqwen2", model_dir)]), device="cpu") as engine:
        items = [{"image": images[name]} for name in PAGES] + QUERIES
        ours = engine.encode_sync("colqwen2", items, output_types=["multivector"]).items
    return reference, [np.asarray(item.multivector) for item in ours]


def assert_answers(vectors: list[np.ndarray], expected) -> None:
    (pages, queries, _), engine = expected
    for got, want, theirs in zip(vectors, engine, pages + queries, strict=True):
        assert got.shape == want.shape == theirs.shape
        np.testing.assert_allclose(got, want, atol=1e-6)
        np.testing.assert_allclose(got, theirs, atol=1e-5)


def test_json_pages_and_queries_equal_the_engine_and_transformers(server, expected):
    images = sample_images()
    items = [{"id": name, "image": base64.b64encode(images[name]).decode()} for name in PAGES]
    body = {"items": items + [{"text": q} for q in QUERIES], "output_types": ["multivector"]}
    response = httpx.post(f"{server.url}/v1/encode/colqwen2", json=body, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["id"] for item in answer["items"]][:len(PAGES)] == PAGES
    assert_answers([np.asarray(item["multivector"], dtype=np.float32) for item in answer["items"]], expected)
    assert answer["usage"]["tokens"] == sum(len(v) for v in expected[1])  # every position of every sequence


def test_msgpack_raw_bytes_answer_tensor_objects_equal_the_engine_and_transformers(server, expected):
    images = sample_images()
    body = {"items": [{"image": images[name]} for name in PAGES] + [{"text": q} for q in QUERIES],
            "output_types": ["multivector"]}
    response = httpx.post(f"{server.url}/v1/encode/colqwen2", content=msgpack.packb(body, use_bin_type=True),
                          headers=MSGPACK, timeout=120)
    assert response.status_code == 200, response.text
    raw = msgpack.unpackb(response.content, raw=False)
    assert set(raw["items"][0]["multivector"]) == {"dtype", "shape", "data"}  # a tensor object, not lists
    answer = loads(response.content, response.headers["Content-Type"])
    assert_answers([np.asarray(item["multivector"]) for item in answer["items"]], expected)


def test_a_colpali_engine_adapter_scores_pages_as_its_merged_model(server, colpali_engine):
    _, merged = colpali_engine
    images = sample_images()
    pages = colqwen2_mrope_pages(merged, [images[name] for name in PAGES])
    (query,) = colpali_engine_queries(merged, ["the cat"])
    wanted = [float((query @ page.T).max(axis=1).sum()) for page in pages]
    body = {"query": "the cat", "items": [{"id": name, "image": base64.b64encode(images[name]).decode()}
                                          for name in PAGES]}
    response = httpx.post(f"{server.url}/v1/score/colqwen25", json=body, timeout=120)
    assert response.status_code == 200, response.text
    ranked = response.json()["scores"]
    np.testing.assert_allclose([s["score"] for s in sorted(ranked, key=lambda s: s["index"])], wanted, atol=1e-4)


def test_msgpack_score_ranks_the_pages_as_score_retrieval(server, expected):
    (_, _, scores), _ = expected
    images = sample_images()
    body = {"query": {"text": QUERIES[0]}, "items": [{"id": name, "image": images[name]} for name in PAGES]}
    response = httpx.post(f"{server.url}/v1/score/colqwen2", content=msgpack.packb(body, use_bin_type=True),
                          headers=MSGPACK, timeout=120)
    assert response.status_code == 200, response.text
    ranked = msgpack.unpackb(response.content, raw=False)["scores"]
    np.testing.assert_allclose([s["score"] for s in sorted(ranked, key=lambda s: s["index"])], scores[0], atol=1e-4)
    assert [s["id"] for s in ranked] == [PAGES[i] for i in np.argsort(-scores[0], kind="stable")]


@pytest.mark.parametrize("route, body, field, fragment", [
    ("score", {"query": {"text": "the cat"}, "items": [{"image": "PAGE"}, {"text": "a text page"}]},
     "items[1]", "ranks page images"),
    ("encode", {"items": [{"image": "PAGE"}, {"image": "SLIVER"}]}, "items[1].image", "at most 200 times"),
    ("encode", {"items": [{"image": "PAGE"}, {"image": "BROKEN"}]}, "items[1].image", ""),
])
def test_what_it_cannot_serve_is_a_400_naming_the_item_and_it_goes_on_serving(server, route, body, field, fragment):
    png = sample_images()["png_rgb"]
    stand_ins = {"PAGE": png, "BROKEN": png[:60],
                 "SLIVER": encode_image(Image.new("RGB", (1000, 4), "white"), "PNG")}
    items = [{"image": stand_ins[item["image"]]} if "image" in item else item for item in body["items"]]
    response = httpx.post(f"{server.url}/v1/{route}/colqwen2",
                          content=msgpack.packb({**body, "items": items}, use_bin_type=True), headers=MSGPACK,
                          timeout=60)
    assert response.status_code == 400, response.content
    message = msgpack.unpackb(response.content, raw=False)["error"]["message"]
    assert field in message and fragment in message
    follow_up = httpx.post(f"{server.url}/v1/encode/colqwen2",
                           json={"items": [{"image": base64.b64encode(png).decode()}]}, timeout=60)
    assert follow_up.status_code == 200, follow_up.text
