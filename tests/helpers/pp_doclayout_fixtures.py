"""A tiny random PP-DocLayoutV3 (no downloads) and transformers' post-processing for it.

    from pp_doclayout_fixtures import make_tiny_pp_doclayout, reference_post_processor

    path = make_tiny_pp_doclayout(tmp_path / "layout")  # PPDocLayoutV3ForObjectDetection + preprocessor_config
    processor = reference_post_processor(64, 64)        # its post_process_object_detection

A 4-stage HGNetV2 (stem 8 wide, 2 layers a block, light blocks in the last two stages), hidden 32,
2 decoder layers, 12 queries, 5 classes, 64 x 64 images. The batch norms' running statistics
and every parameter are randomised (the initialiser leaves norms at 1/0 and several heads at 0,
which would hide a tensor the forward forgot), the weights at unit gain (its 0.01 deviation makes
every query the same after a few dozen convolutions: a comparison of 12 equal rows proves little).

transformers' PPDocLayoutV3ImageProcessor imports torchvision (absent here), so its two
post-processing methods are compiled from its own source file into a small class; the polygon
step (OpenCV) is left out, as SIE answers boxes.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from image_fixtures import _perturb

LABELS = ["text", "title", "table", "figure", "footer"]


def tiny_config():
    from transformers import PPDocLayoutV3Config

    backbone = dict(model_type="hgnet_v2", arch="L", stem_channels=[3, 8, 8], stage_in_channels=[8, 16, 24, 32],
                    stage_mid_channels=[8, 8, 8, 8], stage_out_channels=[16, 24, 32, 40],
                    stage_num_blocks=[1, 1, 2, 1], stage_numb_of_layers=[2, 2, 2, 2],
                    stage_downsample=[False, True, True, True], stage_light_block=[False, False, True, True],
                    stage_kernel_size=[3, 3, 5, 5], hidden_sizes=[16, 24, 32, 40], depths=[1, 1, 2, 1],
                    out_features=["stage1", "stage2", "stage3", "stage4"])
    return PPDocLayoutV3Config(
        backbone_config=backbone, encoder_in_channels=[24, 32, 40], encoder_hidden_dim=32, d_model=32,
        encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_attention_heads=4, decoder_attention_heads=4,
        decoder_layers=2, num_queries=12, x4_feat_dim=16, mask_feature_channels=[16, 16], num_prototypes=8,
        decoder_in_channels=[32, 32, 32], global_pointer_head_size=16, decoder_n_points=2,
        id2label=dict(enumerate(LABELS)), label2id={name: i for i, name in enumerate(LABELS)})


def make_tiny_pp_doclayout(dest: Path, side: int = 64, seed: int = 0) -> Path:
    """A random PPDocLayoutV3ForObjectDetection and its image processor's config in `dest`; returns `dest`."""
    import torch
    from transformers import PPDocLayoutV3ForObjectDetection

    dest = Path(dest)
    torch.manual_seed(seed)
    model = PPDocLayoutV3ForObjectDetection(tiny_config()).eval()
    _perturb(model, seed)
    generator = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_var"):
                buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.5)
            elif name.endswith("running_mean"):
                buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.1)
        for param in model.parameters():
            if param.dim() > 1:  # unit-gain weights (1 / sqrt(fan in)): the signal neither vanishes nor blows up
                fan_in = param[0].numel()
                param.copy_(torch.randn(param.shape, generator=generator) / fan_in ** 0.5)
    model.save_pretrained(dest)
    # what PPDocLayoutV3ImageProcessor(size=...).save_pretrained writes (its defaults)
    (dest / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "PPDocLayoutV3ImageProcessor", "size": {"height": side, "width": side},
        "resample": 3, "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [0, 0, 0], "image_std": [1, 1, 1]}))
    return dest


def reference_post_processor(height: int, width: int):
    """An object with transformers' own `_get_order_seqs` and `post_process_object_detection`."""
    import torch
    import transformers

    path = Path(transformers.__file__).parent / "models/pp_doclayout_v3/image_processing_pp_doclayout_v3.py"
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PPDocLayoutV3ImageProcessor")
    wanted = {"_get_order_seqs", "post_process_object_detection"}
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {m.name for m in methods} == wanted
    namespace: dict = {"torch": torch, "TensorType": object, "requires_backends": lambda *args: None}
    exec(compile(ast.Module(body=methods, type_ignores=[]), str(path), "exec"), namespace)

    class PostProcessor:
        size = {"height": height, "width": width}
        _get_order_seqs = namespace["_get_order_seqs"]
        post_process_object_detection = namespace["post_process_object_detection"]

        def _extract_polygon_points_by_masks(self, boxes, masks, scale_ratio):
            return [None] * len(boxes)  # OpenCV's polygons: not part of SIE's answer

    return PostProcessor()
