"""Qwen3-VL (transformers' `qwen3_vl`) on tiny random weights (tests/helpers/qwen3_vl_fixtures.py): SIE's
own forward equals transformers' `Qwen3VLModel` hidden states within 1e-4 at float32 for text-only,
image-only and mixed sequences (two images of different sizes in one sequence: the learned position
grid resampled per image, DeepStack after both decoder layers, interleaved M-RoPE), packed in one batch
and each alone; Qwen3-VL-Embedding's dense vectors of text, image and image-with-text items, as documents and as
queries with the request's instruction, through the Engine (the built-in card on the tiny stand-in)
equal the published script's recipe (`Qwen3VLEmbedder.process`, written out in the fixtures) within
1e-4, each alone and in a batch of images of other sizes; and
Qwen3-VL-Reranker's scores of text, image and image-with-text documents, and of image queries
(with or without their text) against any of them, equal `Qwen3VLReranker.process`'s within 1e-5.
HTTP: tests/server/test_qwen3_vl_http.py."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from image_fixtures import encode_image, sample_images
from qwen3_vl_fixtures import MERGE, chat, embedding_reference, make_tiny_qwen3_vl, reranker_reference
from sie_engine import Catalog, Engine, WeightsSource
from sie_engine.attention import select_backend
from sie_engine.checkpoints import describe
from sie_engine.errors import InvalidRequest
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.models import family_for
from sie_engine.models.qwen3_vl.inputs import Qwen3VLInputs
from sie_engine.weights import Checkpoint

EMBEDDING = "Qwen/Qwen3-VL-Embedding-2B"
RERANKER = "Qwen/Qwen3-VL-Reranker-2B"
IMAGES = ["png_rgb", "jpeg_rgb", "webp_rgb", "png_gray"]  # 64 x 48, 100 x 75, 33 x 90, 50 x 50: several grids
TEXTS = ["the cat", "a much longer text about the cat and the dog on the beach", "x"]
HIDDEN_TOL = 1e-4
VECTOR_TOL = 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_qwen3_vl(tmp_path_factory.mktemp("qwen3_vl") / "qwen3-vl")


def tiny_card(card_id: str, path: Path):
    # the card's own settings on the tiny stand-in, at float32 (the card serves bfloat16)
    return dataclasses.replace(Catalog.builtin().get(card_id), weights=WeightsSource(path=str(path)), dtype="float32")


@pytest.fixture(scope="module")
def engine(tiny):
    with Engine(Catalog([tiny_card(EMBEDDING, tiny), tiny_card(RERANKER, tiny)]), device="cpu") as engine:
        yield engine


def sie_backbone(path: Path):
    layout = describe(path)
    family = family_for(layout.config)
    with torch.device("meta"):
        model = family.model_class(family.config_from_hf(layout.config),
                                   select_backend(torch.device("cpu"), torch.float32))
    model = materialize(model, torch.device("cpu"), torch.float32).eval()
    with Checkpoint(layout.weight_files) as checkpoint:
        report = load_checkpoint(model, checkpoint, model.weight_spec)  # raises on a missing or misshapen tensor
        assert set(checkpoint) - report.loaded <= {"lm_head.weight"}  # the reranker's head reads it
    return model


def test_the_backbone_equals_transformers_for_text_image_and_mixed_sequences_alone_and_packed(tiny, tmp_path):
    from transformers import Qwen3VLModel

    inputs = Qwen3VLInputs(describe(tiny), 512)
    images = sample_images()
    sequences = [  # (user turn parts: texts and image names)
        ["the cat on the beach"],
        [("image", "jpeg_rgb")],
        ["a cat", ("image", "webp_rgb"), "and", ("image", "png_rgb"), "the end"],
    ]
    processor = inputs.images.processor
    ids_of, pixels_of, grids_of = [], [], []
    for parts in sequences:
        pictures = [Image.open(io.BytesIO(images[p[1]])).convert("RGB") for p in parts if not isinstance(p, str)]
        prompt = chat("Represent the user's input.", [p if isinstance(p, str) else None for p in parts])
        grids: list[tuple[int, int]] = []
        pixels = None
        if pictures:
            processed = processor(images=pictures, return_tensors="pt")
            pixels, grids = processed["pixel_values"], [(int(h), int(w)) for _, h, w in processed["image_grid_thw"]]
            pieces = prompt.split("<|image_pad|>")
            prompt = pieces[0] + "".join("<|image_pad|>" * (h * w // MERGE ** 2) + rest
                                         for (h, w), rest in zip(grids, pieces[1:]))
        ids_of.append(torch.tensor(inputs.plain_ids(prompt), dtype=torch.long))
        pixels_of.append(pixels)
        grids_of.append(grids)
    assert len({g for grids in grids_of for g in grids}) == 3  # three images, three grids

    reference = Qwen3VLModel.from_pretrained(tiny, dtype=torch.float32).eval()
    image_id = reference.config.image_token_id
    wanted = []
    for ids, pixels, grids in zip(ids_of, pixels_of, grids_of):
        kwargs = {} if pixels is None else dict(pixel_values=pixels,
                                                image_grid_thw=torch.tensor([[1, *g] for g in grids]))
        with torch.no_grad():
            wanted.append(reference(input_ids=ids[None], mm_token_type_ids=(ids[None] == image_id).int(),
                                    **kwargs).last_hidden_state[0])

    ours = sie_backbone(tiny)
    backend = ours.visual.backend

    def run(indices: list[int]) -> list[torch.Tensor]:
        ids = torch.cat([ids_of[i] for i in indices])
        lengths = [len(ids_of[i]) for i in indices]
        pixels = [pixels_of[i] for i in indices if pixels_of[i] is not None]
        with torch.no_grad():
            hidden = ours.forward_mixed(ids, lengths, torch.cat(pixels) if pixels else None,
                                        tuple(g for i in indices for g in grids_of[i]),
                                        backend.prepare(lengths, torch.device("cpu")))
        return list(hidden.split(lengths))

    packed = run([0, 1, 2])
    for got, want in zip(packed, wanted, strict=True):
        torch.testing.assert_close(got, want, atol=HIDDEN_TOL, rtol=0)
    for i in range(3):  # each alone: the same rows as in the packed batch
        torch.testing.assert_close(run([i])[0], packed[i], atol=1e-5, rtol=0)
    # text alone through the plain forward (equal M-RoPE axes are plain rotary)
    with torch.no_grad():
        text = ours(ids_of[0], torch.arange(len(ids_of[0])), backend.prepare([len(ids_of[0])], torch.device("cpu")))
    torch.testing.assert_close(text, wanted[0], atol=HIDDEN_TOL, rtol=0)
    # a bare Qwen3VLModel's checkpoint (`visual.*`, `language_model.*`, no `model.` prefix) loads the same
    reference.save_pretrained(tmp_path / "bare")
    for name, tensor in sie_backbone(tmp_path / "bare").state_dict().items():
        torch.testing.assert_close(tensor, ours.state_dict()[name], atol=0, rtol=0)


def encode(engine, items, **fields) -> np.ndarray:
    return np.stack([np.asarray(item.dense) for item in engine.encode_sync(EMBEDDING, items, **fields).items])


def test_text_image_and_text_with_image_items_equal_the_published_embedding_recipe(engine, tiny):
    images = sample_images()
    items = ([{"image": images[name]} for name in IMAGES] + [{"text": t} for t in TEXTS]
             + [{"image": images["jpeg_rgb"], "text": TEXTS[1]}, {"image": images["png_gray"], "text": "x"}])
    wanted = np.stack(embedding_reference(tiny, items))
    ours = encode(engine, items)
    assert ours.shape == (len(items), 32)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(ours, wanted, atol=VECTOR_TOL)
    # each image alone equals itself in the batch of images of other sizes (and of images with texts)
    for i, item in enumerate(items):
        if "image" in item:
            np.testing.assert_allclose(encode(engine, [item])[0], ours[i], atol=1e-5)


def test_queries_carry_the_requests_instruction_as_the_recipe_does(engine, tiny):
    instruction = "Retrieve images or text relevant to the user's query."
    items = [{"text": TEXTS[1]}, {"image": sample_images()["webp_rgb"]},
             {"image": sample_images()["png_rgb"], "text": TEXTS[0]}]
    ours = encode(engine, items, is_query=True, instruction=instruction)
    np.testing.assert_allclose(ours, np.stack(embedding_reference(tiny, items, instruction)), atol=VECTOR_TOL)
    # documents keep the default instruction: the query's changes the vectors
    assert np.abs(ours - encode(engine, items)).max() > 1e-3


def test_text_and_image_documents_score_as_the_published_reranker_recipe(engine, tiny):
    images = sample_images()
    documents = ["the cat sat on the mat", {"image": images["jpeg_rgb"]}, "no",
                 {"image": images["webp_rgb"], "text": "a dog on the beach at sunset"},
                 {"image": images["png_gray"]}]
    parts = [[d] if isinstance(d, str) else [d["image"], *([d["text"]] if "text" in d else [])] for d in documents]
    for instruction in (None, "Find the animal."):
        wanted = reranker_reference(tiny, [(["the cat"], p) for p in parts], instruction)
        result = engine.score_sync(RERANKER, "the cat", documents, instruction=instruction)
        got = {s.index: s.score for s in result.scores}
        np.testing.assert_allclose([got[i] for i in range(len(documents))], wanted, atol=1e-5)
    # an image document alone scores as in the batch of texts and images of other sizes
    alone = engine.score_sync(RERANKER, "the cat", [documents[3]], instruction=instruction).scores[0].score
    np.testing.assert_allclose(alone, got[3], atol=1e-6)


def test_an_image_query_scores_text_and_image_documents_as_the_published_reranker_recipe(engine, tiny):
    """The query's image (its text after it) in the query's place of each pair's prompt, an image
    document's image (its text after it) in the document's: two images of their own sizes in one
    sequence. The query's image is decoded once for all the pairs."""
    images = sample_images()
    documents = ["the cat sat on the mat", {"image": images["webp_rgb"]}, "x",
                 {"image": images["png_rgb"], "text": "a dog on the beach at sunset"}]
    document_parts = [["the cat sat on the mat"], [images["webp_rgb"]], ["x"],
                      [images["png_rgb"], "a dog on the beach at sunset"]]
    for query, parts in (({"image": images["jpeg_rgb"], "text": "the cat"}, [images["jpeg_rgb"], "the cat"]),
                         ({"image": images["png_gray"]}, [images["png_gray"]])):
        wanted = reranker_reference(tiny, [(parts, d) for d in document_parts], "Find the animal.")
        result = engine.score_sync(RERANKER, query, documents, instruction="Find the animal.")
        got = {s.index: s.score for s in result.scores}
        np.testing.assert_allclose([got[i] for i in range(len(documents))], wanted, atol=1e-5)
    # a pair of two images alone scores as in the batch of other pairs
    alone = engine.score_sync(RERANKER, query, [documents[3]], instruction="Find the animal.").scores[0].score
    np.testing.assert_allclose(alone, got[3], atol=1e-6)
    with pytest.raises(InvalidRequest, match=r"query\.image"):
        engine.score_sync(RERANKER, {"image": images["png_rgb"][:60]}, ["a cat"])  # truncated
    with pytest.raises(InvalidRequest, match=r"items\[1\]\.image"):
        engine.score_sync(RERANKER, {"image": images["png_rgb"]}, ["a cat", {"image": images["png_rgb"][:60]}])


def test_the_query_image_runs_through_the_vision_tower_once_per_batch(engine, monkeypatch):
    """Every pair of an image query holds its image: the tower runs each distinct image once and gives
    its features to every pair (the scores above equal the recipe with this in place)."""
    from sie_engine.models.qwen3_vl.model import VisionTower

    towered: list[int] = []
    run = VisionTower.forward

    def counting(self, patches, grids):
        pieces = patches.split([h * w for h, w in grids])
        assert not any(torch.equal(a, b) for i, a in enumerate(pieces) for b in pieces[:i]), "an image ran twice"
        towered.append(len(grids))
        return run(self, patches, grids)

    monkeypatch.setattr(VisionTower, "forward", counting)
    images = sample_images()
    engine.score_sync(RERANKER, {"image": images["jpeg_rgb"]}, ["a", "b", "c", {"image": images["png_rgb"]}])
    assert 2 <= sum(towered) < 5  # the pairs hold five images, two of them distinct


def test_a_reranker_whose_lm_head_is_tied_to_its_embeddings_scores_as_the_recipe(tmp_path):
    from safetensors import safe_open

    tied = make_tiny_qwen3_vl(tmp_path / "tied", seed=1, tied=True)
    with safe_open(str(tied / "model.safetensors"), "pt") as saved:
        assert "lm_head.weight" not in set(saved.keys())  # the head is the embeddings
    documents = ["the cat sat on the mat", {"image": sample_images()["png_rgb"]}]
    wanted = reranker_reference(tied, [(["the cat"], ["the cat sat on the mat"]),
                                       (["the cat"], [sample_images()["png_rgb"]])])
    with Engine(Catalog([tiny_card(RERANKER, tied)]), device="cpu") as engine:
        result = engine.score_sync(RERANKER, "the cat", documents)
    np.testing.assert_allclose([s.score for s in sorted(result.scores, key=lambda s: s.index)], wanted, atol=1e-5)


def test_the_cards_bfloat16_stays_close_to_float32(engine):
    images = sample_images()
    items = [{"image": images["jpeg_rgb"]}, TEXTS[1], {"image": images["png_rgb"], "text": TEXTS[0]}]
    full, half = encode(engine, items), encode(engine, items, precision="bfloat16")
    assert (full * half).sum(1).min() > 0.99


def test_a_processor_saved_as_transformers_4s_fast_one_loads_as_the_pil_one(tiny, tmp_path):
    import json

    from sie_engine.images import load_image_processor

    config = json.loads((tiny / "preprocessor_config.json").read_text())
    saved = {**config, "image_processor_type": "Qwen2VLImageProcessorFast"}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(saved))
    processor = load_image_processor(tmp_path)
    assert type(processor).__name__ == "Qwen2VLImageProcessorPil" and processor.patch_size == 16


def test_what_the_models_cannot_take_is_refused(engine):
    png = sample_images()["png_rgb"]
    with pytest.raises(InvalidRequest, match=r"items\[0\] has both text and document"):
        encode(engine, [{"text": "a cat", "document": png}])
    with pytest.raises(InvalidRequest, match=r"items\[0\]\.image.*at most 200 times"):
        encode(engine, [{"image": encode_image(Image.new("RGB", (1000, 4), "white"), "PNG"), "text": "a cat"}])
    with pytest.raises(InvalidRequest, match=r"items\[1\]\.image"):
        encode(engine, [{"image": png}, {"image": png[:60]}])  # truncated
    with pytest.raises(InvalidRequest, match=r"items\[0\] is a document"):
        engine.score_sync(RERANKER, "the cat", [{"document": png}])
    assert encode(engine, [{"image": png}]).shape == (1, 32)  # and it goes on serving
