"""PP-DocLayoutV3's input preparation: its image processor's arithmetic in torch (transformers'
`PPDocLayoutV3ImageProcessor` runs on torchvision, which SIE leaves out): the RGB picture resized
to the fixed (height, width) with bicubic interpolation and no antialiasing (to approximate
cv2.resize, as the processor says), clamped and rounded back to 8 bits (torchvision's resize of a
uint8 image), rescaled by 1/255 and normalised (mean 0, std 1 in the published processor). Every
image becomes `[3, H, W]` float32: a batch of them runs as one. There is no text side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...checkpoints import CheckpointLayout, describe
from ...images import ImagePreprocessor, prepare_images, read_image_processor_config
from ...tokenizer import VocabularyLookup
from ...validation import Limits
from .config import pp_doclayout_config
from .model import encoder_positions

BICUBIC = 3  # PILImageResampling.BICUBIC, the processor's resample


class LayoutImageProcessor:
    """`processor(images=[picture], return_tensors="np") -> {"pixel_values": [1, 3, H, W]}` with the
    checkpoint's preprocessor_config.json settings (transformers' class defaults where it leaves one out)."""

    def __init__(self, settings: Mapping[str, Any]):
        size = settings.get("size") or {"height": 800, "width": 800}
        if "height" not in size or "width" not in size:
            raise ValueError(f"pp-doclayout image processor size {size!r}: a fixed height and width is required")
        if settings.get("resample", BICUBIC) != BICUBIC:
            raise ValueError(f"pp-doclayout image processor resample {settings.get('resample')!r} is not supported "
                             "(only bicubic, 3, as PaddlePaddle's)")
        if settings.get("do_pad") or settings.get("do_center_crop"):
            raise ValueError("pp-doclayout image processor do_pad / do_center_crop are not supported (the published "
                             "processor only resizes, rescales and normalises)")
        self.size = {"height": int(size["height"]), "width": int(size["width"])}
        self.do_resize = bool(settings.get("do_resize", True))
        self.rescale = float(settings.get("rescale_factor", 1 / 255)) if settings.get("do_rescale", True) else 1.0
        normalize = settings.get("do_normalize", True)
        self.mean = np.asarray(settings.get("image_mean", [0, 0, 0]) if normalize else [0, 0, 0], np.float32)
        self.std = np.asarray(settings.get("image_std", [1, 1, 1]) if normalize else [1, 1, 1], np.float32)

    def __call__(self, images: Sequence[Any], return_tensors: str = "np") -> dict[str, np.ndarray]:
        out = []
        for picture in images:
            x = torch.from_numpy(np.asarray(picture.convert("RGB"), dtype=np.uint8).copy()).permute(2, 0, 1)
            x = x[None].float()  # [1, 3, h, w] 0..255
            if self.do_resize:
                x = F.interpolate(x, size=(self.size["height"], self.size["width"]), mode="bicubic",
                                  align_corners=False, antialias=False).clamp_(0, 255).round_()
            values = x[0].numpy() * np.float32(self.rescale)
            out.append((values - self.mean[:, None, None]) / self.std[:, None, None])
        return {"pixel_values": np.stack(out).astype(np.float32)}


class LayoutImages(ImagePreprocessor):
    """The image role: each image's pixels `[3, H, W]` and its (height, width) as decoded (the pixels
    its regions are answered in); an image counts as the decoder's memory positions."""

    def encode_sized(self, values: Sequence[Any], fields: Sequence[str],
                     limits: Limits) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        sizes: list[tuple[int, int]] = []
        return prepare_images(self.processor, values, fields, limits, sizes=sizes), sizes


class LayoutInputs(VocabularyLookup):
    """No tokenizer: the model reads images only (`images`); `class_names` are config.json's id2label."""

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        if not isinstance(layout, CheckpointLayout):
            layout = describe(layout)
        processor = LayoutImageProcessor(read_image_processor_config(layout.root))
        side = (processor.size["height"], processor.size["width"])
        config = pp_doclayout_config(layout.config, side)
        self.images = LayoutImages(processor, max(side), encoder_positions(config))
        self.class_names = config.id2label
