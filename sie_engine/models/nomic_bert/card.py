"""The card of a card-less NomicBERT directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...card import ModelCard
from ...local_card import encoder_card


def nomic_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """Nomic's own config layout names its window `n_positions` (sentence-transformers' files, when
    present, still have the last word)."""
    window = int(config["n_positions"]) if "n_positions" in config else None
    return encoder_card(name, root, config, window=window)
