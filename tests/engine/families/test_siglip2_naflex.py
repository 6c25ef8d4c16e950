"""SigLIP 2 NaFlex against transformers' Siglip2Model on the same tiny random weights: images of
different aspect ratios (each its own patch grid, packed without padding) and texts in one
request equal `get_image_features` (its padded, masked batch) and `get_text_features`, each item
alone equals it in a mixed batch, the usage counts each image's own patches, admission assumes
the processor's `max_num_patches`, and the built-in card loads on the tiny stand-in."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch

from image_fixtures import _perturb, assert_cosine, sample_images, tiny_siglip_tokenizer
from sie_engine import Catalog, Engine, WeightsSource, card_from_local_dir

MAX_PATCHES = 24  # the processor's budget of patches per image (the model's grid: 4 x 4 positions)
PATCH = 4
TEXTS = ["the cat", "a dog on the grass", "x"]
NAFLEX_CARDS = [card for card in Catalog.builtin() if card.family == "siglip2"]


def make_tiny_siglip2(dest, seed: int = 0):
    from transformers import Siglip2Config, Siglip2ImageProcessor, Siglip2Model

    tokenizer = tiny_siglip_tokenizer()
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=64, projection_size=32,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, num_patches=16,
                  patch_size=PATCH)
    torch.manual_seed(seed)
    model = Siglip2Model(Siglip2Config(text_config=text, vision_config=vision)).eval()
    _perturb(model, seed)
    model.save_pretrained(dest)
    Siglip2ImageProcessor(max_num_patches=MAX_PATCHES, patch_size=PATCH).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def reference(path, images: list[bytes], texts: list[str]) -> np.ndarray:
    """transformers: the images through the checkpoint's processor (padded to max_num_patches, with
    its mask and grids) and `get_image_features`, then the texts padded to 64 tokens."""
    from PIL import Image
    from transformers import AutoTokenizer, Siglip2Model

    from sie_engine.images import load_image_processor

    model = Siglip2Model.from_pretrained(path).eval()
    pictures = [Image.open(io.BytesIO(data)).convert("RGB") for data in images]
    processed = load_image_processor(path)(images=pictures, return_tensors="np")
    inputs = {k: torch.from_numpy(v) for k, v in processed.items()}
    ids = AutoTokenizer.from_pretrained(path)(texts, padding="max_length", max_length=64, return_tensors="pt").input_ids
    with torch.no_grad():
        image_features = model.get_image_features(**inputs).pooler_output
        text_features = model.get_text_features(input_ids=ids).pooler_output
    return torch.cat([image_features, text_features]).numpy()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_siglip2(tmp_path_factory.mktemp("siglip2") / "naflex")


@pytest.fixture(scope="module")
def engine(tiny):
    cards = [card_from_local_dir("naflex", tiny)]
    cards += [dataclasses.replace(card, weights=WeightsSource(path=str(tiny))) for card in NAFLEX_CARDS]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


def vectors(result) -> np.ndarray:
    return np.stack([item.dense for item in result.items])


def grids(path, images: list[bytes]) -> list[tuple[int, int]]:
    from PIL import Image

    from sie_engine.images import load_image_processor

    processor = load_image_processor(path)
    return [tuple(int(n) for n in processor(images=[Image.open(io.BytesIO(d)).convert("RGB")],
                                            return_tensors="np")["spatial_shapes"][0]) for d in images]


def test_images_of_every_shape_and_texts_equal_transformers(engine, tiny):
    images = list(sample_images().values())
    shapes = grids(tiny, images)
    assert len(set(shapes)) >= 3, shapes  # wide, tall and square grids in one batch
    result = engine.encode_sync("naflex", [{"image": b} for b in images] + TEXTS, normalize=False)
    assert_cosine(vectors(result), reference(tiny, images, TEXTS), low=0.99999)
    # each image counts its own patches; a text its 64 positions (padded, as SigLIP's)
    assert result.tokens == sum(h * w for h, w in shapes) + 64 * len(TEXTS)


def test_each_item_alone_equals_it_in_a_mixed_batch(engine):
    items = [{"image": b} for b in sample_images().values()] + TEXTS
    together = vectors(engine.encode_sync("naflex", items, normalize=False))
    alone = np.stack([vectors(engine.encode_sync("naflex", [item], normalize=False))[0] for item in items])
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=1e-4)


def test_admission_assumes_the_processor_budget_of_patches(engine):
    engine.encode_sync("naflex", [{"image": sample_images()["png_rgb"]}])
    assert engine._image_tokens(engine.card("naflex")) == MAX_PATCHES


@pytest.mark.parametrize("card", NAFLEX_CARDS, ids=[c.id for c in NAFLEX_CARDS])
def test_built_in_card_on_a_tiny_stand_in_equals_transformers(engine, tiny, card):
    images = [sample_images()["webp_rgb"], sample_images()["jpeg_rgb"]]
    result = engine.encode_sync(card.id, [{"image": b} for b in images] + TEXTS[:1], normalize=False)
    assert_cosine(vectors(result), reference(tiny, images, TEXTS[:1]), low=0.99999)
    assert card.modalities == ("text", "image") and card.query_tower == "text"
