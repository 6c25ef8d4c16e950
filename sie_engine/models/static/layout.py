"""model2vec's checkpoint layout and the card of a card-less model2vec directory.

Cheap to import (no torch): the card builder and the checkpoint resolver ask it whether a
directory is a model2vec model by file names, config.json and the safetensors header alone.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ...card import ModelCard, WeightsSource
from ...checkpoints.layout import CheckpointLayout, read_config_json

MODEL_TYPE = "model2vec"
ARCHITECTURE = "StaticModel"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
# model2vec's DEFAULT_MAX_LENGTH: `encode` truncates to it when the config names none
DEFAULT_MAX_LENGTH = 512


def _tensor_headers(path: Path) -> dict[str, dict]:
    """name -> {dtype, shape} from a safetensors file's header (no tensor data read)."""
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    header.pop("__metadata__", None)
    return header


def detects(root: Path) -> bool:
    """A model2vec directory: its tokenizer.json and model.safetensors beside a config.json
    that names model2vec (or, in early saves that name nothing, a table called `embeddings`)."""
    root = Path(root)
    if not (root / TOKENIZER_FILE).is_file() or not (root / WEIGHTS_FILE).is_file():
        return False
    config = read_config_json(root)
    if config is None:
        return False
    if config.get("model_type") == MODEL_TYPE or ARCHITECTURE in (config.get("architectures") or ()):
        return True
    if "model_type" in config or "architectures" in config:
        return False
    return "embeddings" in _tensor_headers(root / WEIGHTS_FILE)


def describe_layout(root: Path) -> CheckpointLayout:
    """model2vec's config.json, completed with what the table's header says (rows, width,
    whether per-token weights and a token mapping are present): the typed config needs them
    before any tensor is read."""
    root = Path(root)
    config = dict(read_config_json(root) or {})
    header = _tensor_headers(root / WEIGHTS_FILE)
    if "embeddings" not in header:
        raise ValueError(f"{root / WEIGHTS_FILE} has no tensor named 'embeddings': not a model2vec model")
    rows, dim = header["embeddings"]["shape"]
    vocab = rows
    for name in ("weights", "mapping"):
        if name in header:
            vocab = header[name]["shape"][0]
    config.update(
        model_type=MODEL_TYPE, architectures=[ARCHITECTURE], vocab_size=vocab, hidden_size=dim,
        embedding_rows=rows, token_weights="weights" in header, token_mapping="mapping" in header,
    )
    return CheckpointLayout(kind=MODEL_TYPE, root=root, config=config, tokenizer_source=root)



def local_card(name: str, root: Path) -> ModelCard:
    """A model2vec directory: mean of token rows, normalised and truncated as its config.json
    tells model2vec's `StaticModel.encode` (normalize: false and 512 tokens when it says nothing;
    max_length null, no truncation, becomes the 8,192-token window every local card is held to)."""
    config = json.loads((root / "config.json").read_text())
    window = config.get("max_length", DEFAULT_MAX_LENGTH) or 8192
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), family="static", outputs=("dense",),
                     pooling="mean", normalize=bool(config.get("normalize", False)), max_seq_len=min(int(window), 8192),
                     max_batch_tokens=max(16384, min(int(window), 8192)),
                     description=f"local model2vec directory {root}")
