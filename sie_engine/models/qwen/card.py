"""The card of a card-less Qwen2 / Qwen3 directory: a text encoder pooled at the last token."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...card import ModelCard
from ...local_card import encoder_card


def qwen_card(name: str, root: Path, config: Mapping[str, Any]) -> ModelCard:
    """Last-token pooling unless sentence-transformers' files say otherwise (Qwen3-Embedding's do)."""
    return encoder_card(name, root, config, pooling="last")
