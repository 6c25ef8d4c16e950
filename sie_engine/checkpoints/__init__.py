"""Checkpoint layouts: from a model directory to one `CheckpointLayout`.

Layouts other than a plain Hugging Face directory are registered by name in
`sie_engine.models.LAYOUTS`, as the module that implements them: `detects(root) -> bool`
(cheap: looks at file names) and `describe_layout(root) -> CheckpointLayout`. They are asked
first, in order, and imported only then. Each lives in its family's package and depends on
this one, never the reverse; none imports a head.
"""

from __future__ import annotations

from pathlib import Path

from ..card import ModelCard
from ..models import LAYOUTS, layout_module
from ..weights import resolve_weights
from .layout import CheckpointLayout, not_a_model, plain_layout


def kind(root: Path) -> str:
    """The layout's name ("gliner", ..., or "hf" for anything else) without reading the checkpoint."""
    for name in LAYOUTS:
        if layout_module(name).detects(Path(root)):
            return name
    return "hf"


def describe(root: Path) -> CheckpointLayout:
    """The layout of a model directory; WeightsNotFound when no layout knows it."""
    root = Path(root)
    name = kind(root)
    if name in LAYOUTS:
        return layout_module(name).describe_layout(root)
    layout = plain_layout(root)
    if layout is None:
        raise not_a_model(root)
    return layout


def resolve(card: ModelCard) -> CheckpointLayout:
    """Where a card's files are (installed package, local path or hub cache) and their layout."""
    return describe(resolve_weights(card))


__all__ = ["CheckpointLayout", "LAYOUTS", "describe", "kind", "resolve"]
