"""The card of a card-less OWLv2 directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from .config import owlv2_config


def detector_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """An `Owlv2ForObjectDetection` directory (what its `save_pretrained` and `Owlv2Processor`'s
    write): the `detect` output, served by extract with image items and labels. Texts are the
    labels (the text tower, as many tokens as its positions); images are padded to a square and
    resized to the vision tower's side."""
    typed = owlv2_config(config)
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="owlv2", outputs=("detect",),
                     pooling="none", normalize=False, max_seq_len=typed.max_seq_len, modalities=("text", "image"),
                     image_size=typed.image_size,
                     description=f"local owlv2 directory {root} (open-vocabulary detection: images and labels)")
