"""The card of a card-less ColPali directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource


def colpali_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A ColPali directory (ColPaliForRetrieval and its processor): token vectors of page images
    and queries (every text item is a query), MaxSim through score."""
    from .. import family_for

    typed = family_for(config).config_from_hf(config)
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="colpali", outputs=("multivector",),
                     pooling="none", max_seq_len=512, modalities=("text", "image"), image_size=typed.image_size,
                     options={"multivector": {"kind": "colpali", "score": "sum"}},
                     description=f"local ColPali directory {root} (page images and queries)")
