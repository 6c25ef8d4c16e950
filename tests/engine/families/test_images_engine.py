"""CLIP and SigLIP in the Engine: every checkpoint tensor loaded, batch invariance for texts and
images, images batched by a budget in vision-tower positions, the built-in image cards on tiny
stand-ins of their family (equal to transformers), and the image limits (bytes, pixels, formats)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest
import torch

from image_fixtures import (
    assert_cosine,
    encode_image,
    make_tiny_clip,
    make_tiny_siglip,
    png_bomb,
    reference_features,
    sample_images,
    sample_pil_images,
)
from sie_engine import Catalog, Engine, WeightsSource, card_from_local_dir
from sie_engine.attention import select_backend
from sie_engine.checkpoints import describe
from sie_engine.errors import InvalidRequest, PayloadTooLarge
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.models import family_for
from sie_engine.scheduler import SchedulerEvents
from sie_engine.validation import Limits
from sie_engine.weights import Checkpoint

TEXTS = ["the cat", "a dog", "the the the dog sat with the cat on a mat", "x"]
# the two-tower cards (ColPali's multi-vector card: tests/engine/families/test_colpali.py)
IMAGE_CARDS = [card for card in Catalog.builtin() if "image" in card.modalities and card.family in ("clip", "siglip")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("image-text")
    return {"clip": make_tiny_clip(root / "clip"), "siglip": make_tiny_siglip(root / "siglip")}


class Batches(SchedulerEvents):
    def __init__(self):
        self.seen: list[tuple[int, int]] = []

    def batch(self, model_id, items, tokens, padded, seconds):
        self.seen.append((items, tokens))


@pytest.fixture(scope="module")
def engine(tiny):
    cards = [card_from_local_dir(kind, path) for kind, path in tiny.items()]
    # a budget of 77 positions: four 17-position images (16 patches + class token) per batch
    cards.append(dataclasses.replace(card_from_local_dir("clip-small-batches", tiny["clip"]), max_batch_tokens=77))
    for card in IMAGE_CARDS:  # the built-in cards, their weights pointed at a tiny model of their family
        cards.append(dataclasses.replace(card, weights=WeightsSource(path=str(tiny[card.family]))))
    events = Batches()
    engine = Engine(Catalog(cards), device="cpu", scheduler_events=events,
                    limits=Limits(max_image_pixels=1_000_000, max_image_bytes=2 * 2**20))
    engine.events = events
    yield engine
    engine.close()


def vectors(result) -> np.ndarray:
    return np.stack([item.dense for item in result.items])






@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_every_checkpoint_tensor_is_loaded_with_its_shape(tiny, kind):
    layout = describe(tiny[kind])
    family = family_for(layout.config)
    backend = select_backend(torch.device("cpu"), torch.float32)
    with torch.device("meta"):
        model = family.model_class(family.config_from_hf(layout.config), backend)
    model = materialize(model, torch.device("cpu"), torch.float32)
    with Checkpoint(layout.weight_files) as checkpoint:
        report = load_checkpoint(model, checkpoint, model.weight_spec)  # raises on a missing or misshapen tensor
        assert set(checkpoint) == report.loaded  # and nothing of the checkpoint is left unused


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_each_item_alone_equals_it_in_a_mixed_batch(engine, kind):
    images = list(sample_images().values())
    together = vectors(engine.encode_sync(kind, [{"image": b} for b in images] + TEXTS, normalize=False))
    alone = np.stack([vectors(engine.encode_sync(kind, [item], normalize=False))[0]
                      for item in [{"image": b} for b in images] + TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=1e-4)


def test_images_are_batched_by_a_budget_in_patches(engine):
    engine.events.seen.clear()
    images = [{"image": data} for data in sample_images().values()] * 2  # 12 images of 17 positions each
    result = engine.encode_sync("clip-small-batches", images)
    assert len(result.items) == 12 and result.tokens == 12 * 17
    assert sorted(engine.events.seen, reverse=True) == [(4, 68), (4, 68), (4, 68)]


@pytest.mark.parametrize("card", IMAGE_CARDS, ids=[c.id for c in IMAGE_CARDS])
def test_built_in_image_card_on_a_tiny_stand_in_equals_transformers(engine, tiny, card):
    images = [sample_images()["png_rgb"], sample_images()["jpeg_rgb"]]
    result = engine.encode_sync(card.id, [{"image": b} for b in images] + TEXTS[:2], normalize=False)
    assert_cosine(vectors(result), reference_features(card.family, tiny[card.family], images, TEXTS[:2]))
    assert card.query_tower == "text" and card.image_size and card.dims
    assert engine.encode_sync(card.id, ["a query"], is_query=True).items[0].dense.shape == (16 if card.family ==
                                                                                          "clip" else 32,)


def test_admission_counts_an_image_as_its_positions(engine):
    """Admission bounds a request before decoding it: an image item is the positions its vision
    tower runs (the loaded preprocessor's count), or a bound from the card's image size before."""
    from sie_engine.admission import image_positions_bound

    engine.encode_sync("clip", [{"image": sample_images()["png_rgb"]}])
    assert engine._image_tokens(engine.card("clip")) == 17  # 16 patches and the class token
    never_loaded = dataclasses.replace(engine.card("clip"), id="never-loaded", image_size=336)
    assert engine._image_tokens(never_loaded) == image_positions_bound(336) >= (336 // 14) ** 2 + 1
    assert engine._image_tokens(dataclasses.replace(never_loaded, image_size=None)) is None  # text only


def test_vectors_are_normalised_by_default(engine):
    result = engine.encode_sync("clip", [{"image": sample_images()["png_rgb"]}, "the cat"])
    np.testing.assert_allclose(np.linalg.norm(vectors(result), axis=1), 1.0, rtol=1e-5)


def test_limits_bytes_pixels_and_formats(engine):
    with pytest.raises(PayloadTooLarge, match=r"items\[0\].image is too large in pixels \(2000 x 600\)"):
        engine.encode_sync("clip", [{"image": png_bomb(2000, 600)}])
    with pytest.raises(PayloadTooLarge, match="per image"):
        engine.encode_sync("clip", [{"image": b"\x89PNG" + bytes(3 * 2**20)}])
    tiff = encode_image(sample_pil_images()["png_rgb"], "TIFF")
    with pytest.raises(InvalidRequest, match=r"not an image in an accepted format \(PNG, JPEG, WEBP, GIF, BMP\)"):
        engine.encode_sync("clip", ["fine", {"image": tiff}])
    with pytest.raises(InvalidRequest, match="both text and image"):
        engine.encode_sync("clip", [{"text": "a", "image": b"x"}])
    assert engine.encode_sync("clip", [{"image": sample_images()["png_rgb"]}]).items[0].dense.shape == (16,)


def test_embedded_client_sends_paths_pil_images_and_bytes(engine, tiny, tmp_path):
    from sie_client import SIEClient

    images = sample_images()
    path = tmp_path / "photo.jpeg"
    path.write_bytes(images["jpeg_rgb"])
    gray = sample_pil_images()["png_gray"]
    with SIEClient(engine=engine) as client:
        result = client.encode("clip", [path, {"id": "g", "image": gray}, images["webp_rgb"], "the cat"],
                               normalize=False)
    as_png = encode_image(gray, "PNG")
    ref = reference_features("clip", tiny["clip"], [images["jpeg_rgb"], as_png, images["webp_rgb"]], ["the cat"])
    assert_cosine(vectors(result), ref)
    assert [item.id for item in result.items] == ["0", "g", "2", "3"]


def test_siglip_with_its_sentencepiece_tokenizer_equals_transformers(tmp_path):
    """The Hub's SigLIP 1 checkpoints ship a SentencePiece model only (SiglipTokenizer, Python): lower-cased,
    punctuation dropped, `</s>` kept when a long text is cut, padded to 64."""
    path = make_tiny_siglip(tmp_path / "siglip-spm", sentencepiece=True)
    assert not (path / "tokenizer.json").exists()
    texts = ["The Cat, sat!", "photos of red shoes " * 30, "x"]
    with Engine(Catalog([card_from_local_dir("siglip-spm", path)]), device="cpu") as engine:
        result = engine.encode_sync("siglip-spm", [{"image": sample_images()["png_rgb"]}, *texts], normalize=False)
        with pytest.raises(InvalidRequest, match="longer than the model's window"):
            engine.encode_sync("siglip-spm", texts, truncate=False)
    assert_cosine(vectors(result), reference_features("siglip", path, [sample_images()["png_rgb"]], texts))


def test_bfloat16_precision_serves_images_and_texts_close_to_float32(engine):
    items = [{"image": sample_images()["png_rgb"]}, {"image": sample_images()["webp_rgb"]}, "the cat"]
    full = vectors(engine.encode_sync("siglip", items))
    half = vectors(engine.encode_sync("siglip", items, precision="bfloat16"))
    assert_cosine(half, full, low=0.99)


def test_openclip_weights_beside_the_transformers_ones_are_left_alone(tiny, tmp_path):
    """LAION's repositories ship open_clip_model.safetensors beside model.safetensors: only the latter is read."""
    import shutil

    from safetensors.torch import save_file

    path = tmp_path / "laion-layout"
    shutil.copytree(tiny["clip"], path)
    save_file({"visual.conv1.weight": torch.ones(4, 3, 2, 2), "text_projection": torch.ones(4, 4)},
              str(path / "open_clip_model.safetensors"))
    with Engine(Catalog([card_from_local_dir("laion", path)]), device="cpu") as engine:
        result = engine.encode_sync("laion", [{"image": sample_images()["png_rgb"]}, "the cat"], normalize=False)
    assert_cosine(vectors(result), reference_features("clip", tiny["clip"], [sample_images()["png_rgb"]], ["the cat"]))


def test_the_older_processor_config_of_openai_checkpoints_is_read(tmp_path):
    """openai/clip-vit-base-patch32's preprocessor_config.json: CLIPFeatureExtractor, sizes as plain ints."""
    from PIL import Image

    from sie_engine.images import load_image_processor

    (tmp_path / "preprocessor_config.json").write_text(
        '{"crop_size": 224, "do_center_crop": true, "do_normalize": true, "do_resize": true, '
        '"feature_extractor_type": "CLIPFeatureExtractor", "image_mean": [0.48145466, 0.4578275, 0.40821073], '
        '"image_std": [0.26862954, 0.26130258, 0.27577711], "resample": 3, "size": 224}')
    processor = load_image_processor(tmp_path)
    pixels = processor(images=[Image.new("RGB", (300, 200))], return_tensors="np")["pixel_values"]
    assert type(processor).__name__ == "CLIPImageProcessorPil" and pixels.shape == (1, 3, 224, 224)


def test_a_photo_is_embedded_upright_as_its_exif_orientation_says(engine, tiny):
    from PIL import Image

    picture = sample_pil_images()["jpeg_rgb"]
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", exif=exif)
    upright = io.BytesIO()
    Image.open(io.BytesIO(buffer.getvalue())).transpose(Image.Transpose.ROTATE_270).save(upright, format="PNG")
    result = engine.encode_sync("clip", [{"image": buffer.getvalue()}, "x"], normalize=False)
    assert_cosine(vectors(result), reference_features("clip", tiny["clip"], [upright.getvalue()], ["x"]))
