"""The card of a card-less ColQwen2 directory."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from ...images import MAX_RESIZED_PIXELS, read_image_processor_config


def colqwen2_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A ColQwen2 directory (ColQwen2ForRetrieval and its processor): token vectors of page images
    and queries (every text item is a query), MaxSim through score. `image_size`: the side of a
    square of the processor's max pixels (within SIE's resize bound), admission's bound before load."""
    size = read_image_processor_config(Path(root)).get("size") or {}
    most = min(int(size.get("longest_edge") or size.get("max_pixels") or MAX_RESIZED_PIXELS), MAX_RESIZED_PIXELS)
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="colqwen2", outputs=("multivector",),
                     pooling="none", max_seq_len=512, modalities=("text", "image"), image_size=math.isqrt(most),
                     options={"multivector": {"kind": "colqwen2", "score": "sum"}},
                     description=f"local ColQwen2 directory {root} (page images and queries)")
