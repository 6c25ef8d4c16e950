"""The card of a card-less two-tower image-text directory (CLIP, SigLIP, SigLIP 2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource


def image_text_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A CLIP or SigLIP directory (what `CLIPModel.save_pretrained` and its processor's write): dense
    vectors, normalised, for text and image items; the window is the text tower's positions."""
    from .. import family_for

    typed = family_for(config).config_from_hf(config)
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), outputs=("dense",), pooling="last",
                     normalize=True, max_seq_len=typed.max_seq_len, dims=typed.projection_dim,
                     modalities=("text", "image"), image_size=typed.image_size,
                     description=f"local {config['model_type']} directory {root} (text and image items)")
