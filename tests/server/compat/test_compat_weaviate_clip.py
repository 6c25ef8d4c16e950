"""Weaviate's multi2vec-clip protocol (`/weaviate/{model}/vectorize`) on a real `sie-server serve`
with a tiny random CLIP and SigLIP served from local directories: the bytes Weaviate's Go client
sends (modules/multi2vec-clip/clients/vectorizer.go: json.Marshal of `{Texts, Images}` with
omitempty), the answer decoded as its `vecResponse`, each vector equal to transformers'
`get_text_features` / `get_image_features` on the same weights with the container's convention
(weaviate/multi2vec-clip-inference clip.py: CLIP normalised, SigLIP raw); bad images answered in
the container's `{"error"}` shape with SIE's statuses."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest

from image_fixtures import (
    assert_cosine,
    hostile_images,
    make_tiny_clip,
    make_tiny_siglip,
    reference_features,
    sample_images,
)
from server_fixtures import start_server

TEXTS = ["the cat", "a dog on the grass", "photos of <red> shoes & hats"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("clip-models")
    return {"clip": make_tiny_clip(root / "clip"), "siglip": make_tiny_siglip(root / "siglip")}


@pytest.fixture(scope="module")
def http(models, tmp_path_factory):
    process = start_server("--model", f"clip={models['clip']}", "--model", f"siglip={models['siglip']}",
                           "--preload", "clip", "--max-image-pixels", "4000000",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        with httpx.Client(base_url=process.url, timeout=60) as client:
            yield client
    finally:
        process.stop()


def go_marshal(texts: list[str], images: list[str]) -> bytes:
    """encoding/json's bytes for vecRequest{Texts, Images} (`omitempty`): compact, empty lists left
    out, and <, >, & escaped as Go escapes them for HTML safety."""
    body = {name: value for name, value in (("texts", texts), ("images", images)) if value}
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def vectorize(http, model: str, texts: list[str], images: list[str]) -> httpx.Response:
    return http.post(f"/weaviate/{model}/vectorize", content=go_marshal(texts, images),
                     headers={"Content-Type": "application/json"})


def vec_response(answer: httpx.Response) -> tuple[np.ndarray, np.ndarray]:
    """Go's vecResponse {TextVectors, ImageVectors [][]float32; Error string}: lists of lists of numbers."""
    body = answer.json()
    assert set(body) <= {"textVectors", "imageVectors", "error"}, body.keys()
    for name in ("textVectors", "imageVectors"):
        assert isinstance(body[name], list) and all(isinstance(v, list) for v in body[name]), name
    return tuple(np.array(body[name], dtype=np.float32) if body[name] else np.zeros((0, 0), np.float32)  # type: ignore[return-value]
                 for name in ("textVectors", "imageVectors"))


def base64_images() -> list[str]:
    return [base64.b64encode(data).decode() for data in sample_images().values()]


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_texts_and_images_equal_transformers_with_the_containers_normalisation(http, models, kind):
    answer = vectorize(http, kind, TEXTS, base64_images())
    assert answer.status_code == 200, answer.text
    text_vectors, image_vectors = vec_response(answer)
    reference = reference_features(kind, models[kind], list(sample_images().values()), TEXTS)
    images, texts = reference[:len(image_vectors)], reference[len(image_vectors):]
    if kind == "clip":  # ClipInferenceOpenAI: text_embeds / text_embeds.norm(), the same for images
        images, texts = (r / np.linalg.norm(r, axis=1, keepdims=True) for r in (images, texts))
    # ClipInferenceSigCLIP: get_*_features as they are (cosine and norm both checked)
    for ours, ref in ((text_vectors, texts), (image_vectors, images)):
        assert_cosine(ours, ref)
        np.testing.assert_allclose(np.linalg.norm(ours, axis=1), np.linalg.norm(ref, axis=1), rtol=1e-4)


def test_one_kind_alone_and_neither(http):
    images = base64_images()
    only_image = vectorize(http, "clip", [], images[:1])  # the module's VectorizeImage: texts left out
    assert only_image.status_code == 200, only_image.text
    text_vectors, image_vectors = vec_response(only_image)
    assert text_vectors.shape[0] == 0 and image_vectors.shape == (1, 16)
    together = vec_response(vectorize(http, "clip", TEXTS, images[:1]))
    np.testing.assert_allclose(together[1], image_vectors, atol=1e-5)  # batching with texts changes nothing
    text_vectors, image_vectors = vec_response(vectorize(http, "clip", TEXTS[:2], []))  # the module's Texts (nearText)
    assert text_vectors.shape == (2, 16) and image_vectors.shape[0] == 0
    np.testing.assert_allclose(text_vectors, together[0][:2], atol=1e-5)
    assert http.post("/weaviate/clip/vectorize", json={}).json() == {"textVectors": [], "imageVectors": []}


@pytest.mark.parametrize("name, status", [("truncated_png", 400), ("text_named_jpg", 400), ("huge_png", 413)])
def test_bad_images_are_the_containers_error_with_sies_status(http, name, status):
    good = base64_images()[0]
    bad = base64.b64encode(hostile_images()[name]).decode()
    answer = vectorize(http, "clip", TEXTS[:1], [good, bad])
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"} and body["error"].startswith("images[1]"), body  # what the module prints
    assert vectorize(http, "clip", [], [good]).status_code == 200  # the server goes on serving


@pytest.mark.parametrize("body, field", [
    ({"texts": ["a"], "images": ["not base64!"]}, "images[0]"),
    ({"texts": "a"}, "texts"),
    ({"texts": ["a", 5]}, "texts[1]"),
    ({"images": [None]}, "images[0]"),
    ({"texts": ["a"], "config": {"dimensions": 8}}, "config"),  # Weaviate's client sends no config
])
def test_malformed_requests_are_400_naming_the_field(http, body, field):
    answer = http.post("/weaviate/clip/vectorize", json=body)
    assert answer.status_code == 400, answer.text
    assert field in answer.json()["error"], answer.text


def test_unknown_model_meta_and_readiness(http):
    missing = vectorize(http, "no/such-clip", TEXTS, [])
    assert missing.status_code == 404 and set(missing.json()) == {"error"}, missing.text
    assert http.post("/weaviate/no/such-clip/vectorize", json={}).status_code == 404
    meta = http.get("/weaviate/clip/meta")  # the module's MetaInfo decodes any JSON object
    assert meta.status_code == 200, meta.text
    info = meta.json()["model"]
    assert info["_name_or_path"] == "clip" and info["modalities"] == ["text", "image"] and info["image_size"] == 32
    assert "/tmp/" not in meta.text and "…/clip" in info["description"]  # answers name no local paths
    assert http.get("/weaviate/clip/.well-known/ready").status_code == 204
    assert http.get("/weaviate/clip/.well-known/live").status_code == 204


def test_the_router_forwards_every_weaviate_route():
    """The router mounts every route the server mounts for Weaviate's modules, with the model in
    `/weaviate/<model>/<route>` (both from compat_routes.WEAVIATE)."""
    from sie_server import compat_weaviate
    from sie_server.compat_routes import MODEL_MATCH, WEAVIATE
    from sie_server.router import RouterConfig, create_router_app

    served = {(method, path.replace(MODEL_MATCH, "{model}")) for method, path, _, _ in WEAVIATE.paths()}
    routed = {(r.method, r.resource.canonical) for r in create_router_app(RouterConfig()).router.routes()}
    assert served and served <= routed
    assert all(callable(getattr(compat_weaviate, handler)) for _, _, handler, _ in WEAVIATE.paths())
