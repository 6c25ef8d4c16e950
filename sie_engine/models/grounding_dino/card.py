"""The card of a card-less Grounding DINO directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from .config import grounding_dino_config
from .model import LARGEST_IMAGE


def detector_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A `GroundingDinoForObjectDetection` directory (what its `save_pretrained` and
    `GroundingDinoProcessor`'s write): the `detect` output, served by extract with image items and
    labels; the labels are one prompt of at most `max_text_len` tokens."""
    typed = grounding_dino_config(config)
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="grounding-dino", outputs=("detect",),
                     pooling="none", normalize=False, max_seq_len=typed.max_seq_len, modalities=("text", "image"),
                     image_size=max(LARGEST_IMAGE),
                     description=f"local grounding-dino directory {root} "
                                 "(open-vocabulary detection: images and labels)")
