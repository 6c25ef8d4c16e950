"""The toy family's checkpoint layout: a directory with `toy_config.json` (no config.json), its
`tokenizer.json` (whitespace words) and `model.safetensors`."""

from __future__ import annotations

import json
from pathlib import Path

from sie_engine.card import ModelCard, WeightsSource
from sie_engine.checkpoints.layout import CheckpointLayout

CONFIG_FILE = "toy_config.json"


def detects(root: Path) -> bool:
    return (Path(root) / CONFIG_FILE).is_file()


def describe_layout(root: Path) -> CheckpointLayout:
    root = Path(root)
    config = json.loads((root / CONFIG_FILE).read_text())
    return CheckpointLayout(kind="toy", root=root, config={**config, "architectures": ["ToyModel"]},
                            tokenizer_source=root)


def local_card(name: str, root: Path) -> ModelCard:
    """Dense vectors (the family's max-pooled head), normalised; the window is its positions."""
    config = json.loads((Path(root) / CONFIG_FILE).read_text())
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="toy", outputs=("dense",),
                     normalize=True, max_seq_len=int(config["max_positions"]),
                     description=f"local toy directory {root}")
