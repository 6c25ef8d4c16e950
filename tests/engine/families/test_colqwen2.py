"""ColQwen2 (vidore/colqwen2-v1.0-hf's layout: ColQwen2ForRetrieval with its ColQwen2Processor) on tiny
random weights: SIE's multi-vector embeddings of page images (each at its own resolution: four sizes,
four patch grids, sequences of different lengths) and query texts equal transformers'
`model(**processor.process_images(...))` / `process_queries` (the same vectors kept, every value within
1e-5 at float32), a page alone equals the same page in a batch of pages of other sizes, and MaxSim
scores, the score task's as well as those computed from encoded vectors, equal
`ColQwen2Processor.score_retrieval` within 1e-4. Through the Engine, with the built-in card on the tiny
stand-in. HTTP: tests/server/test_colqwen2_http.py."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from colqwen2_fixtures import TINY_EMBEDDING_DIM, colqwen2_mrope_pages, colqwen2_reference, make_tiny_colqwen2
from image_fixtures import encode_image, sample_images
from sie_engine import Catalog, Engine, WeightsSource, card_from_local_dir
from sie_engine.attention import select_backend
from sie_engine.checkpoints import describe
from sie_engine.errors import InvalidRequest
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.models import family_for
from sie_engine.weights import Checkpoint

CARD = "vidore/colqwen2-v1.0-hf"
PAGES = ["png_rgb", "jpeg_rgb", "webp_rgb", "png_gray"]  # 64 x 48, 100 x 75, 33 x 90, 50 x 50: four grids
QUERIES = ["the cat", "a much longer question about the cat and the dog on page three", "x"]
VECTOR_TOL = 1e-5
SCORE_TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_colqwen2(tmp_path_factory.mktemp("colqwen2") / "colqwen2")


@pytest.fixture(scope="module")
def reference(tiny):
    images = sample_images()
    return colqwen2_reference(tiny, [images[name] for name in PAGES], QUERIES)


@pytest.fixture(scope="module")
def engine(tiny):
    # the card's own settings on the tiny stand-in, at float32 (the card serves bfloat16; a test below checks it)
    card = dataclasses.replace(Catalog.builtin().get(CARD), weights=WeightsSource(path=str(tiny)), dtype="float32")
    with Engine(Catalog([card]), device="cpu") as engine:
        yield engine


def assert_vectors_equal(ours: list[np.ndarray], ref: list[np.ndarray]) -> None:
    for got, want in zip(ours, ref, strict=True):
        assert got.shape == want.shape  # the same vectors kept: every page position, every query token
        np.testing.assert_allclose(got, want, atol=VECTOR_TOL)


def maxsim(query: np.ndarray, page: np.ndarray) -> float:
    return float((query @ page.T).max(axis=1).sum())


def encode(engine, items, **fields) -> list[np.ndarray]:
    result = engine.encode_sync(CARD, items, output_types=["multivector"], **fields)
    return [np.asarray(item.multivector) for item in result.items]


def test_every_checkpoint_tensor_is_loaded_with_its_shape(tiny):
    layout = describe(tiny)
    family = family_for(layout.config)
    assert family.name == "colqwen2"
    with torch.device("meta"):
        model = family.model_class(family.config_from_hf(layout.config), select_backend(torch.device("cpu"),
                                                                                         torch.float32))
    model = materialize(model, torch.device("cpu"), torch.float32)
    with Checkpoint(layout.weight_files) as checkpoint:
        report = load_checkpoint(model, checkpoint, model.weight_spec)  # raises on a missing or misshapen tensor
        # everything but the retrieval projection, which the multivector head loads, and the unused LM head
        assert set(checkpoint) - report.loaded == {"embedding_proj_layer.weight", "embedding_proj_layer.bias",
                                                   "vlm.lm_head.weight"} & set(checkpoint)


def test_pages_and_queries_in_one_request_equal_transformers(engine, reference):
    pages, queries, scores = reference
    images = sample_images()
    ours = encode(engine, [{"image": images[name]} for name in PAGES] + QUERIES)
    assert len({page.shape[0] for page in pages}) > 1  # the pages' own resolutions give different lengths
    assert ours[0].shape[1] == TINY_EMBEDDING_DIM
    assert_vectors_equal(ours, pages + queries)
    ours_pages, ours_queries = ours[:len(PAGES)], ours[len(PAGES):]
    ours_scores = np.array([[maxsim(q, p) for p in ours_pages] for q in ours_queries])
    np.testing.assert_allclose(ours_scores, scores, atol=SCORE_TOL)


def test_a_page_or_query_alone_equals_itself_in_a_mixed_batch(engine):
    images = sample_images()
    batch = encode(engine, [{"image": images[name]} for name in PAGES] + QUERIES)
    for i, name in enumerate(PAGES):
        np.testing.assert_allclose(encode(engine, [{"image": images[name]}])[0], batch[i], atol=VECTOR_TOL)
    np.testing.assert_allclose(encode(engine, [QUERIES[1]])[0], batch[len(PAGES) + 1], atol=VECTOR_TOL)


def test_score_ranks_page_images_by_maxsim_on_the_server(engine, reference):
    *_, scores = reference
    images = sample_images()
    for q, query in enumerate(QUERIES):
        result = engine.score_sync(CARD, query, [{"id": name, "image": images[name]} for name in PAGES])
        got = {s.index: s.score for s in result.scores}
        np.testing.assert_allclose([got[i] for i in range(len(PAGES))], scores[q], atol=SCORE_TOL)
        assert [s.index for s in result.scores] == list(np.argsort(-scores[q], kind="stable"))


def test_pages_it_cannot_take_are_refused_and_the_model_goes_on_serving(engine):
    png = sample_images()["png_rgb"]
    with pytest.raises(InvalidRequest, match=r"items\[1\]\.image.*at most 200 times"):
        encode(engine, [{"image": png}, {"image": encode_image(Image.new("RGB", (1000, 4), "white"), "PNG")}])
    with pytest.raises(InvalidRequest, match=r"items\[1\]\.image"):
        engine.score_sync(CARD, "the cat", [{"image": png}, {"image": png[:60]}])  # truncated
    with pytest.raises(InvalidRequest, match=r"items\[1\] is a text.*ranks page images"):
        engine.score_sync(CARD, "the cat", [{"image": png}, "a text page"])
    assert len(engine.score_sync(CARD, "the cat", [{"image": png}]).scores) == 1


def test_the_transformers_4_tensor_names_serve_the_same_from_a_local_directory(tiny, engine, tmp_path):
    """transformers 5 saves `vlm.visual.*` and `vlm.language_model.*`; checkpoints converted under
    transformers 4 (as vidore/colqwen2-v1.0-hf was) nest both in `vlm.model.`, beside `vlm.lm_head`."""
    from safetensors.torch import load_file, save_file

    other_dir = tmp_path / "colqwen2-v4-names"
    shutil.copytree(tiny, other_dir)
    tensors = load_file(other_dir / "model.safetensors")
    renamed = {name.replace("vlm.", "vlm.model.", 1): value for name, value in tensors.items()}
    renamed["vlm.lm_head.weight"] = tensors["vlm.language_model.embed_tokens.weight"].clone()
    save_file(renamed, other_dir / "model.safetensors", metadata={"format": "pt"})
    items = [{"image": sample_images()["webp_rgb"]}, "the cat"]
    with Engine(Catalog([card_from_local_dir("other", other_dir)]), device="cpu") as other:
        got = other.encode_sync("other", items, output_types=["multivector"]).items
    for a, b in zip(got, encode(engine, items), strict=True):
        np.testing.assert_allclose(np.asarray(a.multivector), b, atol=1e-6)


def test_the_cards_bfloat16_stays_close_to_float32(engine, reference):
    pages, queries, _ = reference
    ours = encode(engine, [{"image": sample_images()[PAGES[0]]}, QUERIES[0]], precision="bfloat16")
    for got, want in zip(ours, [pages[0], queries[0]]):
        assert got.shape == want.shape and (got * want).sum(1).min() > 0.99


def mrope_card(path: Path):
    """The directory's card with the M-RoPE switch on (as a card turns it on: options.backbone)."""
    card = card_from_local_dir("mrope", path)
    return dataclasses.replace(card, options={**card.options, "backbone": {"mrope_positions": True}})


def test_the_cards_mrope_switch_gives_get_rope_indexs_3d_positions_over_pages(tiny, engine, reference):
    """`options.backbone: {mrope_positions: true}`: pages equal transformers' model under the position_ids
    `get_rope_index` computes (colpali-engine's), which differ from its default 1D ones; queries unchanged."""
    pages, queries, _ = reference
    images = sample_images()
    wanted = colqwen2_mrope_pages(tiny, [images[name] for name in PAGES])
    with Engine(Catalog([mrope_card(tiny)]), device="cpu") as mrope:
        result = mrope.encode_sync("mrope", [{"image": images[name]} for name in PAGES] + QUERIES,
                                   output_types=["multivector"])
    ours = [np.asarray(item.multivector) for item in result.items]
    assert_vectors_equal(ours, wanted + queries)
    assert max(np.abs(got - plain).max() for got, plain in zip(ours, pages)) > 1e-3  # the positions matter


# ---- ColQwen2.5: the same retriever over a Qwen2.5-VL (windowed vision attention, RMSNorm, SwiGLU) ----

@pytest.fixture(scope="module")
def tiny_2_5(tmp_path_factory) -> Path:
    return make_tiny_colqwen2(tmp_path_factory.mktemp("colqwen2.5") / "colqwen2.5", qwen2_5=True)


def test_colqwen2_5_pages_and_queries_equal_transformers_alone_and_in_a_batch(tiny_2_5):
    """Each page's patches attend within 16-pixel windows in block 0 (a window cut at the page's
    right and bottom edges where its grid is not a multiple), the whole page in block 1; the M-RoPE
    switch works the same over Qwen2.5-VL."""
    images = sample_images()
    pages, queries, scores = colqwen2_reference(tiny_2_5, [images[name] for name in PAGES], QUERIES)
    with Engine(Catalog([card_from_local_dir("colqwen2.5", tiny_2_5)]), device="cpu") as engine:
        result = engine.encode_sync("colqwen2.5", [{"image": images[name]} for name in PAGES] + QUERIES,
                                    output_types=["multivector"])
        ours = [np.asarray(item.multivector) for item in result.items]
        alone = engine.encode_sync("colqwen2.5", [{"image": images[PAGES[2]]}], output_types=["multivector"])
        np.testing.assert_allclose(np.asarray(alone.items[0].multivector), ours[2], atol=VECTOR_TOL)
    assert_vectors_equal(ours, pages + queries)
    ours_scores = np.array([[maxsim(q, p) for p in ours[:len(PAGES)]] for q in ours[len(PAGES):]])
    np.testing.assert_allclose(ours_scores, scores, atol=SCORE_TOL)
    # and under the M-RoPE switch, get_rope_index's positions
    with Engine(Catalog([mrope_card(tiny_2_5)]), device="cpu") as mrope:
        result = mrope.encode_sync("mrope", [{"image": images[name]} for name in PAGES], output_types=["multivector"])
    assert_vectors_equal([np.asarray(item.multivector) for item in result.items],
                         colqwen2_mrope_pages(tiny_2_5, [images[name] for name in PAGES]))
