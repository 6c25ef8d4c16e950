"""The card of a card-less PP-DocLayoutV3 directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from ...images import read_image_processor_config


def layout_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """A `PPDocLayoutV3ForObjectDetection` directory with its image processor: the `layout` output,
    served by extract with image and document items, over its own classes (config.json's id2label)."""
    size = read_image_processor_config(Path(root)).get("size") or {"height": 800, "width": 800}
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="pp-doclayout", outputs=("layout",),
                     pooling="none", normalize=False, modalities=("image",), query_tower="image",
                     image_size=max(int(size["height"]), int(size["width"])),
                     description=f"local pp-doclayout directory {root} (layout detection: regions by class)")
