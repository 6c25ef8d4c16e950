"""PP-DocLayoutV3 (PPDocLayoutV3ForObjectDetection) against transformers on the same tiny random
weights: every checkpoint tensor loaded (transformers' saved names and its module names alike), the
class logits, boxes and order logits equal (float32: 1e-5 absolute, 1e-4 relative) for a batch of
three images, an image alone equal to it in the batch, and the post-processing (threshold, top-k
over query x class, pixel boxes, reading order) equal to `post_process_object_detection`'s."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from image_fixtures import sample_pil_images
from pp_doclayout_fixtures import LABELS, make_tiny_pp_doclayout, reference_post_processor
from sie_engine import card_from_local_dir
from sie_engine.batch import pack_images
from sie_engine.layers.weights import WeightLoadError, load_checkpoint
from sie_engine.models.pp_doclayout.postprocess import layout_regions
from sie_engine.runner import build_runner
from sie_engine.weights import Checkpoint

ATOL, RTOL = 1e-5, 1e-4
SIDE = 64


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_pp_doclayout(tmp_path_factory.mktemp("layout") / "layout", SIDE)


@pytest.fixture(scope="module")
def reference(tiny):
    from transformers import PPDocLayoutV3ForObjectDetection

    return PPDocLayoutV3ForObjectDetection.from_pretrained(tiny).eval()


@pytest.fixture(scope="module")
def runner(tiny):
    return build_runner(card_from_local_dir("tiny-layout", tiny), tiny, torch.device("cpu"))


@pytest.fixture(scope="module")
def pixels(runner):
    """Three pictures (two aspect ratios and a page-like one) through SIE's preprocessing: `[3, 3, S, S]`."""
    images = sample_pil_images()
    pictures = [images["png_rgb"], images["webp_rgb"], images["png_rgb"].rotate(90, expand=True)]
    processed = runner.tokenizer.images.processor(images=pictures)
    return torch.from_numpy(processed["pixel_values"])


@pytest.fixture(scope="module")
def expected(reference, pixels):
    with torch.no_grad():
        return reference(pixel_values=pixels)


def sie_rows(runner, pixels: torch.Tensor) -> torch.Tensor:
    """The runner's image batch through forward_images: `[B, Q, labels + 4 + Q]`."""
    images = runner.tokenizer.images
    batch = pack_images(list(pixels.numpy()), [images.image_tokens] * len(pixels), runner.backend, runner.device,
                        torch.float32)
    with torch.inference_mode():
        rows = runner.backbone.forward_images(batch.pixel_values, batch.attn, batch.grids)
    return rows.view(len(pixels), runner.backbone.config.num_queries, -1)


def test_every_checkpoint_tensor_is_loaded(runner, tiny):
    model = runner.backbone
    with Checkpoint(runner.layout.weight_files) as checkpoint:
        tensors = dict(checkpoint.items())
    report = load_checkpoint(model, tensors, model.weight_spec)
    assert report.loaded == set(tensors)
    # transformers' module names (what its loader maps to the saved ones) load the same
    renamed = {name.replace("encoder.encoder.", "encoder.aifi.").replace("self_attn.out_proj.", "self_attn.o_proj.")
               .replace(".fc1.", ".mlp.fc1.").replace(".fc2.", ".mlp.fc2."): t for name, t in tensors.items()}
    assert renamed.keys() != tensors.keys()
    assert load_checkpoint(model, renamed, model.weight_spec).loaded == set(renamed)
    missing = {name: t for name, t in tensors.items() if "decoder_global_pointer" not in name}
    with pytest.raises(WeightLoadError, match="decoder_global_pointer"):
        load_checkpoint(model, missing, model.weight_spec)


def test_logits_boxes_and_order_equal_transformers(runner, pixels, expected):
    rows = sie_rows(runner, pixels)
    classes = len(LABELS)
    torch.testing.assert_close(rows[..., :classes], expected.logits, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(rows[..., classes:classes + 4], expected.pred_boxes, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(rows[..., classes + 4:], expected.order_logits, atol=ATOL, rtol=RTOL)
    assert expected.pred_boxes.std() > 0.01 and expected.logits.std() > 0.01  # nothing degenerate compared


def test_an_image_alone_equals_it_in_a_batch(runner, pixels):
    batched = sie_rows(runner, pixels)
    alone = sie_rows(runner, pixels[1:2])
    torch.testing.assert_close(alone[0], batched[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("threshold", ["median", 0.0, 1.0])
def test_post_processing_equals_transformers(expected, threshold):
    sizes = [(48, 64), (90, 33), (64, 48)]
    processor = reference_post_processor(SIDE, SIDE)
    for i, size in enumerate(sizes):
        scores = expected.logits[i].sigmoid().flatten().topk(expected.logits.shape[1]).values
        cut = float(scores.median()) if threshold == "median" else threshold
        one = type(expected)(logits=expected.logits[i:i + 1], pred_boxes=expected.pred_boxes[i:i + 1],
                             order_logits=expected.order_logits[i:i + 1], out_masks=expected.out_masks[i:i + 1])
        ref = processor.post_process_object_detection(one, threshold=cut, target_sizes=[size])[0]
        ours = layout_regions(expected.logits[i], expected.pred_boxes[i], expected.order_logits[i], cut, size)
        np.testing.assert_allclose(ours.scores, ref["scores"].numpy(), atol=1e-6)
        assert ours.labels.tolist() == ref["labels"].tolist()
        np.testing.assert_allclose(ours.boxes, ref["boxes"].numpy().reshape(-1, 4), atol=1e-4)
        assert ours.order.tolist() == ref["order_seq"].tolist()
        if threshold == "median":
            assert 0 < len(ours.scores) < scores.numel()


def test_registry_resolves_the_checkpoint_to_the_family(tiny):
    from sie_engine.models import family_for

    config = json.loads((tiny / "config.json").read_text())
    assert family_for(config).name == "pp-doclayout"
    assert family_for({"model_type": "pp_doclayout_v3"}).name == "pp-doclayout"


@pytest.mark.parametrize(("key", "value"), [("mask_enhanced", False), ("learn_initial_query", True),
                                            ("normalize_before", True)])
def test_a_config_this_forward_does_not_implement_is_refused_naming_it(tiny, key, value):
    from sie_engine.models.pp_doclayout.config import pp_doclayout_config

    config = json.loads((tiny / "config.json").read_text())
    with pytest.raises(ValueError, match=f"{key}: {value!r} is not supported"):
        pp_doclayout_config({**config, key: value})


def test_preprocessing_at_the_side_is_the_pixels_over_255_and_other_sizes_resize_to_it(runner):
    """A picture already at the processor's side passes the bicubic resize unchanged (no antialias): its
    pixels / 255, channels first (mean 0, std 1); another size comes out at the side, within 0..1."""
    from PIL import Image

    processor = runner.tokenizer.images.processor
    rng = np.random.default_rng(0)
    same = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    out = processor(images=[Image.fromarray(same)])["pixel_values"]
    np.testing.assert_allclose(out[0], same.transpose(2, 0, 1) / 255, atol=1e-6)
    other = processor(images=[Image.fromarray(rng.integers(0, 256, (37, 90, 3), dtype=np.uint8))])["pixel_values"]
    assert other.shape == (1, 3, SIDE, SIDE) and other.min() >= 0 and other.max() <= 1
    # 8-bit values after the resize, as torchvision's resize of a uint8 image leaves them
    np.testing.assert_allclose(other * 255, np.round(other * 255), atol=1e-3)


@pytest.mark.parametrize(("settings", "fragment"), [({"size": {"shortest_edge": 800}}, "fixed height and width"),
                                                    ({"resample": 2}, "resample"), ({"do_pad": True}, "do_pad")])
def test_an_image_processor_this_preprocessing_does_not_implement_is_refused(settings, fragment):
    from sie_engine.models.pp_doclayout.inputs import LayoutImageProcessor

    with pytest.raises(ValueError, match=fragment):
        LayoutImageProcessor(settings)
