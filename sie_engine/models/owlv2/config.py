"""OWLv2's typed config: CLIP's (`ImageTextConfig`), read from an `Owlv2ForObjectDetection` config.json."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..clip.model import ImageTextConfig, complete_towers


def owlv2_config(config: Mapping[str, Any]) -> ImageTextConfig:
    """OWLv2's config.json (`text_config`, `vision_config`, `projection_dim`; keys the file leaves
    out filled in by transformers' Owlv2Config, as for CLIP)."""
    text, vision, top = complete_towers(config, "owlv2")
    if top["projection_dim"] != text["hidden_size"]:  # every published OWLv2: 512 and 512
        raise ValueError(f"projection_dim {top['projection_dim']} != text_config.hidden_size {text['hidden_size']}: "
                         "OWLv2's class head compares patches projected to the text width with the projected queries")
    return ImageTextConfig.parse(text, vision, top["projection_dim"])
