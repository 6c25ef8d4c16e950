"""ColPali (vidore/colpali-v1.3-hf's layout: ColPaliForRetrieval with its ColPaliProcessor) on tiny
random weights: SIE's multi-vector embeddings of page images and query texts equal transformers'
`model(**processor.process_images(...))` / `process_queries` (same number of vectors, cosine >=
0.9999 per vector at float32), and MaxSim scores, the score task's on the server as well as those
computed from encoded vectors, equal `ColPaliProcessor.score_retrieval` within 1e-4. Through the
Engine (the built-in card on the tiny stand-in), over HTTP (JSON) and through SIEClient."""

from __future__ import annotations

import base64
import dataclasses
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from colpali_fixtures import TINY_EMBEDDING_DIM, TINY_IMAGE_TOKENS, colpali_reference, make_tiny_colpali
from image_fixtures import sample_images
from server_fixtures import start_server
from sie_client import SIEClient
from sie_engine import Catalog, Engine, WeightsSource, card_from_local_dir
from sie_engine.attention import select_backend
from sie_engine.checkpoints import describe
from sie_engine.errors import InvalidRequest
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.models import family_for
from sie_engine.weights import Checkpoint

CARD = "vidore/colpali-v1.3-hf"
PAGES = ["png_rgb", "jpeg_rgb", "webp_rgb", "png_gray"]  # sizes and formats differ; all resized to one square
QUERIES = ["the cat", "a much longer question about the cat and the dog on page three", "x"]
SCORE_TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_colpali(tmp_path_factory.mktemp("colpali") / "colpali")


@pytest.fixture(scope="module")
def reference(tiny):
    images = sample_images()
    return colpali_reference(tiny, [images[name] for name in PAGES], QUERIES)


@pytest.fixture(scope="module")
def engine(tiny):
    # the card's own settings on the tiny stand-in, at float32 (the card serves bfloat16; the last test checks it)
    card = dataclasses.replace(Catalog.builtin().get(CARD), weights=WeightsSource(path=str(tiny)), dtype="float32")
    with Engine(Catalog([card]), device="cpu") as engine:
        yield engine


def assert_vectors_equal(ours: list[np.ndarray], ref: list[np.ndarray]) -> None:
    for got, want in zip(ours, ref, strict=True):
        assert got.shape == want.shape  # the same vectors kept: every page position, every query token
        cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert cosine.min() >= 0.9999, cosine.min()


def maxsim(query: np.ndarray, page: np.ndarray) -> float:
    return float((query @ page.T).max(axis=1).sum())


def test_every_checkpoint_tensor_is_loaded_with_its_shape(tiny):
    layout = describe(tiny)
    family = family_for(layout.config)
    assert family.name == "colpali"
    with torch.device("meta"):
        model = family.model_class(family.config_from_hf(layout.config), select_backend(torch.device("cpu"),
                                                                                         torch.float32))
    model = materialize(model, torch.device("cpu"), torch.float32)
    with Checkpoint(layout.weight_files) as checkpoint:
        report = load_checkpoint(model, checkpoint, model.weight_spec)  # raises on a missing or misshapen tensor
        # everything but the retrieval projection, which the multivector head loads
        assert set(checkpoint) - report.loaded == {"embedding_proj_layer.weight", "embedding_proj_layer.bias"}


def test_pages_and_queries_in_one_request_equal_transformers(engine, reference):
    pages, queries, scores = reference
    images = sample_images()
    items = [{"image": images[name]} for name in PAGES] + QUERIES
    result = engine.encode_sync(CARD, items, output_types=["multivector"])
    ours = [np.asarray(item.multivector) for item in result.items]
    assert ours[0].shape[0] > TINY_IMAGE_TOKENS and ours[0].shape[1] == TINY_EMBEDDING_DIM
    assert_vectors_equal(ours, pages + queries)
    ours_pages, ours_queries = ours[:len(PAGES)], ours[len(PAGES):]
    ours_scores = np.array([[maxsim(q, p) for p in ours_pages] for q in ours_queries])
    np.testing.assert_allclose(ours_scores, scores, atol=SCORE_TOL)
    # a page alone gives the vectors it gives in a batch
    alone = engine.encode_sync(CARD, [{"image": images[PAGES[1]]}], output_types=["multivector"]).items[0]
    np.testing.assert_allclose(np.asarray(alone.multivector), ours[1], atol=1e-5)


def test_score_ranks_page_images_by_maxsim_on_the_server(engine, reference):
    *_, scores = reference
    images = sample_images()
    for q, query in enumerate(QUERIES):
        result = engine.score_sync(CARD, query, [{"id": name, "image": images[name]} for name in PAGES])
        got = {s.index: s.score for s in result.scores}
        np.testing.assert_allclose([got[i] for i in range(len(PAGES))], scores[q], atol=SCORE_TOL)
        assert [s.index for s in result.scores] == list(np.argsort(-scores[q], kind="stable"))


def test_a_corrupt_page_image_or_a_text_page_is_refused_and_the_model_goes_on_serving(engine):
    with pytest.raises(InvalidRequest, match=r"items\[1\]\.image"):
        engine.score_sync(CARD, "the cat", [{"image": sample_images()["png_rgb"]},
                                            {"image": sample_images()["png_rgb"][:60]}])  # truncated
    with pytest.raises(InvalidRequest, match=r"items\[1\] is a text.*ranks page images"):
        engine.score_sync(CARD, "the cat", [{"image": sample_images()["png_rgb"]}, "a text page"])
    assert len(engine.score_sync(CARD, "the cat", [{"image": sample_images()["png_rgb"]}]).scores) == 1


def test_the_other_tensor_names_serve_the_same_from_a_local_directory(tiny, engine, tmp_path):
    """save_pretrained writes the decoder nested (vlm.language_model.model.*) and the vision tower
    flat; the other naming (the decoder flat, as transformers 5 holds it, the vision tower nested in
    SiglipVisionModel's vision_model, as transformers 4 saved it, and a tied lm_head) loads the same."""
    from safetensors.torch import load_file, save_file

    other_dir = tmp_path / "colpali-other-names"
    shutil.copytree(tiny, other_dir)
    tensors = load_file(other_dir / "model.safetensors")
    renamed = {name.replace("vlm.language_model.model.", "vlm.language_model.")
               .replace("vlm.vision_tower.", "vlm.vision_tower.vision_model."): value
               for name, value in tensors.items()}
    renamed["vlm.language_model.lm_head.weight"] = tensors["vlm.language_model.model.embed_tokens.weight"].clone()
    save_file(renamed, other_dir / "model.safetensors", metadata={"format": "pt"})
    items = [{"image": sample_images()["png_rgb"]}, "the cat"]
    with Engine(Catalog([card_from_local_dir("other", other_dir)]), device="cpu") as other:
        got = other.encode_sync("other", items, output_types=["multivector"]).items
    want = engine.encode_sync(CARD, items, output_types=["multivector"]).items
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a.multivector), np.asarray(b.multivector), atol=1e-6)


def test_the_cards_bfloat16_stays_close_to_float32(engine, reference):
    pages, queries, _ = reference
    items = [{"image": sample_images()[PAGES[0]]}, QUERIES[0]]
    result = engine.encode_sync(CARD, items, output_types=["multivector"], precision="bfloat16")
    for got, want in zip([np.asarray(item.multivector) for item in result.items], [pages[0], queries[0]]):
        assert got.shape == want.shape and (got * want).sum(1).min() > 0.99


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    process = start_server("--model", f"colpali={tiny}", "--preload", "colpali",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


def test_http_json_encode_and_the_client_score_equal_transformers(server, reference):
    pages, queries, scores = reference
    images = sample_images()
    items = [{"image": base64.b64encode(images[name]).decode()} for name in PAGES] + [{"text": QUERIES[0]}]
    response = httpx.post(f"{server.url}/v1/encode/colpali", json={"items": items, "output_types": ["multivector"]},
                          timeout=60)
    assert response.status_code == 200, response.text
    ours = [np.asarray(item["multivector"], dtype=np.float32) for item in response.json()["items"]]
    assert_vectors_equal(ours, pages + queries[:1])
    with SIEClient(server.url, encoding="msgpack") as client:
        result = client.score("colpali", QUERIES[1], [images[name] for name in PAGES])
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[i] for i in range(len(PAGES))], scores[1], atol=SCORE_TOL)
