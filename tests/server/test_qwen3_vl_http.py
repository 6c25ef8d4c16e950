"""Qwen3-VL-Embedding and Qwen3-VL-Reranker over HTTP: a real `sie-server serve` with the built-in cards
on a tiny random Qwen3-VL (a `--models` directory of the cards with their weights replaced): image,
text and image-with-text items through `POST /v1/encode` in JSON (base64 images) and msgpack (raw
bytes, tensor objects), through the typed client and (texts) OpenAI's `/v1/embeddings`, each vector
equal to the in-process Engine's (1e-6) and to the published embedding recipe (1e-4,
tests/helpers/qwen3_vl_fixtures.py); text pairs through `POST /v1/score` and the Cohere/Jina
`POST /v1/rerank`, image documents through `/v1/score` in msgpack and an image query in JSON, equal to
the published reranker recipe (1e-5); video items (an MP4 in JSON as a data: URI, in msgpack as raw bytes,
with its text, and through the typed client) equal to the Engine's and the recipe's
(tests/helpers/video_fixtures.py), and a video query against video documents through `/v1/score` in JSON
and msgpack and the typed client equal to the reranker recipe; what the models cannot take answered
with a 400 naming the item."""

from __future__ import annotations

import base64
import dataclasses

import httpx
import msgpack
import numpy as np
import pytest
import yaml
from PIL import Image

from image_fixtures import encode_image, sample_images
from qwen3_vl_fixtures import embedding_reference, make_tiny_qwen3_vl, reranker_reference
from server_fixtures import start_server
from sie_client import SIEClient
from sie_client.wire import loads
from sie_engine import Catalog, Engine, WeightsSource
from video_fixtures import Video, encode_video, synthetic_frames, video_embedding_reference, video_reranker_reference

EMBEDDING = "Qwen/Qwen3-VL-Embedding-2B"
RERANKER = "Qwen/Qwen3-VL-Reranker-2B"
EMBED, RERANK = "qwen3-vl-embedding", "qwen3-vl-reranker"  # the cards' names on this server
IMAGES = ["png_rgb", "webp_rgb"]
TEXTS = ["the cat", "x"]
DOCUMENTS = ["the cat sat on the mat", "a dog on the beach"]
MSGPACK = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


@pytest.fixture(scope="module")
def cards(tmp_path_factory):
    """The built-in cards on the tiny weights at float32, as a `--models` directory would hold them."""
    # 2048 positions: a reranker pair of a video and the judging prompt passes 512
    root = make_tiny_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl") / "qwen3-vl", positions=2048)
    builtin = Catalog.builtin()
    made = [dataclasses.replace(builtin.get(card_id), id=name, weights=WeightsSource(path=str(root)),
                                dtype="float32") for card_id, name in ((EMBEDDING, EMBED), (RERANKER, RERANK))]
    directory = tmp_path_factory.mktemp("qwen3-vl-cards")
    for card in made:
        (directory / f"{card.id}.yaml").write_text(yaml.safe_dump(card.to_dict()))
    return root, directory, made


@pytest.fixture(scope="module")
def server(cards, tmp_path_factory):
    process = start_server("--models", str(cards[1]), "--preload", EMBED, log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def expected(cards):
    """(the published recipe's vectors, the Engine's) of the image items then the text items."""
    root, _, made = cards
    images = sample_images()
    items = [{"image": images[name]} for name in IMAGES] + [{"text": t} for t in TEXTS] + [paired_item(images)]
    with Engine(Catalog(made), device="cpu") as engine:
        ours = engine.encode_sync(EMBED, items).items
    return np.stack(embedding_reference(root, items)), np.stack([np.asarray(item.dense) for item in ours])


def paired_item(images, wire=lambda picture: picture) -> dict:
    """An image with its text: one item, one vector (the script's `{image, text}` input)."""
    return {"image": wire(images["jpeg_rgb"]), "text": "the cat on the beach"}


def assert_vectors(got: np.ndarray, expected) -> None:
    recipe, engine = expected
    np.testing.assert_allclose(got, engine, atol=1e-6)
    np.testing.assert_allclose(got, recipe, atol=1e-4)


def test_json_image_and_text_items_equal_the_engine_and_the_published_recipe(server, expected):
    images = sample_images()
    items = [{"id": name, "image": base64.b64encode(images[name]).decode()} for name in IMAGES]
    paired = paired_item(images, lambda picture: base64.b64encode(picture).decode())
    response = httpx.post(f"{server.url}/v1/encode/{EMBED}", json={"items": items + TEXTS + [paired]}, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["id"] for item in answer["items"]][:len(IMAGES)] == IMAGES
    assert_vectors(np.asarray([item["dense"] for item in answer["items"]], dtype=np.float32), expected)


def test_msgpack_raw_bytes_answer_tensor_objects_equal_the_engine_and_the_published_recipe(server, expected):
    images = sample_images()
    body = {"items": [{"image": images[name]} for name in IMAGES] + [{"text": t} for t in TEXTS]
            + [paired_item(images)]}
    response = httpx.post(f"{server.url}/v1/encode/{EMBED}", content=msgpack.packb(body, use_bin_type=True),
                          headers=MSGPACK, timeout=120)
    assert response.status_code == 200, response.text
    assert set(msgpack.unpackb(response.content, raw=False)["items"][0]["dense"]) == {"dtype", "shape", "data"}
    answer = loads(response.content, response.headers["Content-Type"])
    assert_vectors(np.stack([np.asarray(item["dense"]) for item in answer["items"]]), expected)


def test_the_typed_client_encodes_images_and_texts(server, expected):
    images = sample_images()
    with SIEClient(server.url) as client:
        result = client.encode(EMBED, [{"image": images[name]} for name in IMAGES] + TEXTS + [paired_item(images)])
    assert_vectors(np.stack([np.asarray(item.dense) for item in result.items]), expected)


def test_openais_embeddings_route_answers_the_text_items_vectors(server, expected):
    response = httpx.post(f"{server.url}/v1/embeddings", json={"model": EMBED, "input": TEXTS}, timeout=120)
    assert response.status_code == 200, response.text
    vectors = np.asarray([row["embedding"] for row in response.json()["data"]], dtype=np.float32)
    recipe, engine = expected
    texts = slice(len(IMAGES), len(IMAGES) + len(TEXTS))
    np.testing.assert_allclose(vectors, engine[texts], atol=1e-6)
    np.testing.assert_allclose(vectors, recipe[texts], atol=1e-4)


def test_text_pairs_score_and_rerank_as_the_published_reranker_recipe(server, cards):
    wanted = reranker_reference(cards[0], [(["the cat"], [d]) for d in DOCUMENTS])
    response = httpx.post(f"{server.url}/v1/score/{RERANK}", json={"query": "the cat", "items": DOCUMENTS},
                          timeout=120)
    assert response.status_code == 200, response.text
    scores = sorted(response.json()["scores"], key=lambda s: s["index"])
    np.testing.assert_allclose([s["score"] for s in scores], wanted, atol=1e-5)
    # Cohere's / Jina's rerank route: the same scores, best first
    response = httpx.post(f"{server.url}/v1/rerank", json={"model": RERANK, "query": "the cat",
                                                           "documents": DOCUMENTS}, timeout=120)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["index"] for r in results] == list(np.argsort(-np.asarray(wanted), kind="stable"))
    np.testing.assert_allclose([r["relevance_score"] for r in results], sorted(wanted, reverse=True), atol=1e-5)


def test_msgpack_image_documents_score_as_the_published_reranker_recipe(server, cards):
    images = sample_images()
    documents = [{"image": images["png_rgb"]}, "a dog on the beach", {"image": images["webp_rgb"], "text": "a cat"}]
    wanted = reranker_reference(cards[0], [(["the cat"], [images["png_rgb"]]), (["the cat"], [documents[1]]),
                                           (["the cat"], [images["webp_rgb"], "a cat"])])
    body = {"query": "the cat", "items": documents}
    response = httpx.post(f"{server.url}/v1/score/{RERANK}", content=msgpack.packb(body, use_bin_type=True),
                          headers=MSGPACK, timeout=120)
    assert response.status_code == 200, response.text
    scores = sorted(msgpack.unpackb(response.content, raw=False)["scores"], key=lambda s: s["index"])
    np.testing.assert_allclose([s["score"] for s in scores], wanted, atol=1e-5)


def test_json_image_query_scores_text_documents_as_the_published_reranker_recipe(server, cards):
    """An image query (base64 in JSON) with its text, against text documents and an image document."""
    image = sample_images()["webp_rgb"]
    wanted = reranker_reference(cards[0], [([image, "a cat"], [d]) for d in DOCUMENTS])
    query = {"image": base64.b64encode(image).decode(), "text": "a cat"}
    response = httpx.post(f"{server.url}/v1/score/{RERANK}", json={"query": query, "items": DOCUMENTS}, timeout=120)
    assert response.status_code == 200, response.text
    scores = sorted(response.json()["scores"], key=lambda s: s["index"])
    np.testing.assert_allclose([s["score"] for s in scores], wanted, atol=1e-5)
    both = httpx.post(f"{server.url}/v1/score/{RERANK}", timeout=60,  # an image query beside an image document
                      json={"query": query, "items": [DOCUMENTS[0], {"image": query["image"]}]})
    assert both.status_code == 200, both.text
    pair = reranker_reference(cards[0], [([image, "a cat"], [DOCUMENTS[0]]), ([image, "a cat"], [image])])
    np.testing.assert_allclose([s["score"] for s in sorted(both.json()["scores"], key=lambda s: s["index"])], pair,
                               atol=1e-5)
    with SIEClient(server.url) as client:  # the typed client takes the image as bytes (or a path, a PIL image)
        typed = client.score(RERANK, {"image": image, "text": "a cat"}, DOCUMENTS)
    np.testing.assert_allclose([s.score for s in sorted(typed.scores, key=lambda s: s.index)], wanted, atol=1e-5)
    empty = httpx.post(f"{server.url}/v1/score/{RERANK}", json={"query": {}, "items": DOCUMENTS}, timeout=60)
    assert empty.status_code == 400 and "query.text is required" in empty.json()["error"]["message"]


@pytest.mark.parametrize("route, model, body, field", [
    ("encode", EMBED, {"items": [{"text": "a cat", "image": "SLIVER"}]}, "items[0].image"),
    ("encode", EMBED, {"items": [{"image": "PNG"}, {"image": "BROKEN"}]}, "items[1].image"),
    ("score", RERANK, {"query": "the cat", "items": ["a cat", {"image": "PNG", "dpi": 72}]}, "items[1]"),
])
def test_what_they_cannot_take_is_a_400_naming_the_item(server, route, model, body, field):
    png = sample_images()["png_rgb"]
    stand_ins = {"PNG": png, "BROKEN": png[:60], "SLIVER": encode_image(Image.new("RGB", (1000, 4), "white"), "PNG")}
    items = [{**item, "image": stand_ins[item["image"]]} if "image" in item else item for item in body["items"]]
    response = httpx.post(f"{server.url}/v1/{route}/{model}", content=msgpack.packb({**body, "items": items},
                                                                                   use_bin_type=True),
                          headers=MSGPACK, timeout=60)
    assert response.status_code == 400, response.content
    assert field in msgpack.unpackb(response.content, raw=False)["error"]["message"]


def test_video_items_in_json_msgpack_and_the_typed_client_equal_the_engine_and_the_recipe(server, cards, tmp_path):
    root, _, made = cards
    video = encode_video(synthetic_frames(12, 96, 64), fps=4)
    items = [{"video": video}, {"video": video, "text": "a moving square"}]
    with Engine(Catalog(made), device="cpu") as engine:
        expected = (np.stack(video_embedding_reference(root, items)),
                    np.stack([np.asarray(item.dense) for item in engine.encode_sync(EMBED, items).items]))
    uri = "data:video/mp4;base64," + base64.b64encode(video).decode()
    response = httpx.post(f"{server.url}/v1/encode/{EMBED}", timeout=120,
                          json={"items": [{"video": uri}, {"video": uri, "text": "a moving square"}]})
    assert response.status_code == 200, response.text
    assert_vectors(np.asarray([item["dense"] for item in response.json()["items"]], dtype=np.float32), expected)
    packed = httpx.post(f"{server.url}/v1/encode/{EMBED}", content=msgpack.packb({"items": items}, use_bin_type=True),
                        headers=MSGPACK, timeout=120)
    assert packed.status_code == 200, packed.content
    assert_vectors(np.stack([np.asarray(item["dense"]) for item in loads(packed.content, MSGPACK["Accept"])["items"]]),
                   expected)
    path = tmp_path / "clip.mp4"  # the typed client reads a video's path (or takes its bytes)
    path.write_bytes(video)
    with SIEClient(server.url) as client:
        typed = client.encode(EMBED, [{"video": path}, {"video": video, "text": "a moving square"}])
    assert_vectors(np.stack([np.asarray(item.dense) for item in typed.items]), expected)
    broken = httpx.post(f"{server.url}/v1/encode/{EMBED}", timeout=60,
                        json={"items": [{"video": base64.b64encode(b"nope").decode()}]})
    assert broken.status_code == 400 and "items[0].video" in broken.json()["error"]["message"], broken.text


def test_a_video_query_against_video_documents_in_json_msgpack_and_the_typed_client_scores_as_the_recipe(
        server, cards, tmp_path):
    root = cards[0]
    query, document = (encode_video(synthetic_frames(12, 96, 64), fps=4),
                       encode_video(synthetic_frames(7, 70, 50, seed=1), fps=2, container="webm"))
    wanted = video_reranker_reference(root, [([Video(query), "a square"], [Video(document)]),
                                             ([Video(query), "a square"], ["a moving square"])])

    def scores(answer: dict) -> list[float]:
        by_index = {item["index"]: item["score"] for item in answer["scores"]}
        return [by_index[0], by_index[1]]

    uri = "data:video/mp4;base64," + base64.b64encode(query).decode()
    body = {"query": {"video": uri, "text": "a square"},
            "items": [{"video": base64.b64encode(document).decode()}, "a moving square"]}
    response = httpx.post(f"{server.url}/v1/score/{RERANK}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(scores(response.json()), wanted, atol=1e-5)
    packed = httpx.post(f"{server.url}/v1/score/{RERANK}", headers=MSGPACK, timeout=120, content=msgpack.packb(
        {"query": {"video": query, "text": "a square"}, "items": [{"video": document}, "a moving square"]},
        use_bin_type=True))
    assert packed.status_code == 200, packed.content
    np.testing.assert_allclose(scores(loads(packed.content, MSGPACK["Accept"])), wanted, atol=1e-5)
    path = tmp_path / "query.mp4"  # the typed client reads the query video's path
    path.write_bytes(query)
    with SIEClient(server.url) as client:
        typed = client.score(RERANK, {"video": path, "text": "a square"}, [{"video": document}, "a moving square"])
    np.testing.assert_allclose([s.score for s in sorted(typed.scores, key=lambda s: s.index)], wanted, atol=1e-5)
    both = httpx.post(f"{server.url}/v1/score/{RERANK}", timeout=60,
                      json={"query": {"video": uri, "image": uri}, "items": ["a cat"]})
    assert both.status_code == 400 and "both image and video" in both.json()["error"]["message"], both.text
    broken = httpx.post(f"{server.url}/v1/score/{RERANK}", timeout=60,
                        json={"query": {"video": base64.b64encode(b"nope").decode()}, "items": ["a cat"]})
    assert broken.status_code == 400 and "query.video" in broken.json()["error"]["message"], broken.text
