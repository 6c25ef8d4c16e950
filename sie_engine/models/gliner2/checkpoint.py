"""The GLiNER2 (span architecture) checkpoint layout and its typed config.

A GLiNER2 directory (fastino/gliner2-base-v1, saved by the `gliner2` library) holds
`config.json` with `model_type: extractor` (the extractor's settings, not a backbone's),
the backbone's config in `encoder_config/config.json`, `model.safetensors` with the
backbone under `encoder.*` beside the heads (`span_rep`, `classifier`, `count_pred`,
`count_embed`), and the tokenizer with GLiNER2's ten special tokens added. This module
answers those questions for SIE's loader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from ...checkpoints.layout import CheckpointLayout
from ..gliner.checkpoint import checkpoint_vocab_size

BACKBONE_PREFIX = "encoder."
# GLiNER2's SchemaTransformer.SPECIAL_TOKENS, in its order (added when a save lacks them)
SPECIAL_TOKENS = ("[SEP_STRUCT]", "[SEP_TEXT]", "[P]", "[C]", "[E]", "[R]", "[L]", "[EXAMPLE]", "[OUTPUT]",
                  "[DESCRIPTION]")
MAX_COUNT = 20  # count_pred's classes (GLiNER2's CountLSTM max_count)


def read_config(root: Path) -> dict | None:
    path = Path(root) / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def detects(root: Path) -> bool:
    """The layout registry's question: a config.json whose model_type is GLiNER2's `extractor`."""
    config = read_config(root)
    return config is not None and config.get("model_type") == "extractor"


@dataclass(frozen=True)
class Gliner2Config:
    max_width: int = 8  # longest span, in words
    model_name: str = ""

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> Gliner2Config:
        """Validate config.json: SIE serves the span architecture with GLiNER2's published settings."""
        supported = {"architecture": "span", "counting_layer": "count_lstm", "token_pooling": "first"}
        for key, value in supported.items():
            if (config.get(key) or value) != value:  # absent or null: gliner2's default
                raise ValueError(f"GLiNER2 config.json: {key}={config[key]!r} is not supported by SIE (only {value!r})")
        span_head = config.get("span_head") or {}
        if span_head.get("span_mode", "markerV0") != "markerV0":
            raise ValueError(f"GLiNER2 config.json: span_head.span_mode={span_head['span_mode']!r} is not supported "
                             "(only 'markerV0')")
        max_width = span_head.get("max_width", config.get("max_width", 8))
        return Gliner2Config(max_width=int(max_width), model_name=str(config.get("model_name", "")))


def load_gliner2_config(root: Path) -> Gliner2Config:
    return Gliner2Config.from_dict(read_config(root) or {})


def describe_layout(root: Path) -> CheckpointLayout:
    root = Path(root)
    encoder = root / "encoder_config" / "config.json"
    if not encoder.is_file():
        raise ValueError(f"{root}: a GLiNER2 save needs encoder_config/config.json (the backbone's config)")
    config = json.loads(encoder.read_text())
    config["vocab_size"] = checkpoint_vocab_size(root)  # grown by the special tokens
    has_tokenizer = (root / "tokenizer.json").is_file() or (root / "tokenizer_config.json").is_file()
    if not has_tokenizer:
        raise ValueError(f"{root}: a GLiNER2 save needs its tokenizer (tokenizer.json) beside config.json")
    return CheckpointLayout(kind="gliner2", root=root, config=config, tokenizer_source=root,
                            extra_tokens=SPECIAL_TOKENS, backbone_prefix_suffix=BACKBONE_PREFIX)


def local_card(name: str, root: Path) -> ModelCard:
    """The card of a card-less directory: a GLiNER2 save: entities and classification (extract)."""
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), outputs=("gliner2",), max_seq_len=512,
                     description=f"local GLiNER2 directory {root}")
