"""Checkpoint layouts: from a model directory to one `CheckpointLayout`.

Layouts other than a plain Hugging Face directory register here by name, as the module
that implements them: `detects(root) -> bool` (cheap: looks at file names) and
`describe_layout(root) -> CheckpointLayout`. They are asked first, in order, and imported
only then. GLiNER's lives with GLiNER's head and depends on this package, never the
reverse.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ..card import ModelCard
from ..weights import resolve_weights
from .layout import CheckpointLayout, not_a_model, plain_layout

LAYOUTS: dict[str, str] = {
    "gliner": "sie_engine.heads.gliner_checkpoint",
    "glirel": "sie_engine.heads.glirel_checkpoint",
    "gliner2": "sie_engine.heads.gliner2_checkpoint",
    "gliclass": "sie_engine.heads.gliclass_checkpoint",
    "model2vec": "sie_engine.arch.static",
}


def kind(root: Path) -> str:
    """The layout's name ("gliner", ..., or "hf" for anything else) without reading the checkpoint."""
    for name, module in LAYOUTS.items():
        if importlib.import_module(module).detects(Path(root)):
            return name
    return "hf"


def describe(root: Path) -> CheckpointLayout:
    """The layout of a model directory; WeightsNotFound when no layout knows it."""
    root = Path(root)
    name = kind(root)
    if name in LAYOUTS:
        return importlib.import_module(LAYOUTS[name]).describe_layout(root)
    layout = plain_layout(root)
    if layout is None:
        raise not_a_model(root)
    return layout


def resolve(card: ModelCard) -> CheckpointLayout:
    """Where a card's files are (installed package, local path or hub cache) and their layout."""
    return describe(resolve_weights(card))


__all__ = ["CheckpointLayout", "LAYOUTS", "describe", "kind", "resolve"]
