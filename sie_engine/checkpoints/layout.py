"""One description of a checkpoint directory, whatever its layout.

The loader, the tokenizer, the memory planner and the card builder read this instead
of probing files themselves: where the backbone's config and tokenizer come from,
which tokens must be added, which files hold the weights and where the backbone's
tensors sit in them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import WeightsNotFound
from ..weights import weight_files


@dataclass(frozen=True)
class CheckpointLayout:
    """kind: "hf" (a Hugging Face model directory), "sentence-transformers" (the same plus
        modules.json and its module folders) or another layout's name ("gliner").
    config: the backbone's config.json contents.
    tokenizer_source: the directory the tokenizer loads from.
    extra_tokens: tokens to add to that tokenizer, in order (GLiNER's prompt tokens).
    bos_eos: turn the tokenizer's bos/eos tokens on (as GLiNER loads its tokenizer).
    weight_files: the files holding the tensors (listed when asked for: a directory without
        them is reported after its architecture, which is the likelier mistake).
    backbone_prefix_suffix: the backbone's tensors sit under a prefix ending so ("" : any).
    lowercase: lowercase texts before tokenising (sentence-transformers' `do_lower_case`).
    weights_root: the directory of the weight files where it is not `root` (an adapter's base).
    view: the checkpoint as the family names its tensors, over the files' tensors (None: as they
        are); a layout that renames or merges tensors at load (colpali-engine's) gives one.
    """

    kind: str
    root: Path
    config: Mapping[str, Any]
    tokenizer_source: Path
    extra_tokens: tuple[str, ...] = ()
    bos_eos: bool = False
    backbone_prefix_suffix: str = ""
    lowercase: bool = False
    weights_root: Path | None = None
    view: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None

    @property
    def weight_files(self) -> tuple[Path, ...]:
        return tuple(weight_files(self.weights_root or self.root))

    def tensors(self, files: Mapping[str, Any]) -> Mapping[str, Any]:
        """The checkpoint's tensors by the family's names, over the open weight files."""
        return self.view(files) if self.view is not None else files


def read_config_json(root: Path) -> dict | None:
    """A directory's config.json, or None when it has none or it is not JSON (for layouts' `detects`)."""
    return read_json(Path(root) / "config.json")


def read_json(path: Path) -> Any:
    """A JSON file's contents, or None when it is absent or not JSON."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def refuse_settings(config: Mapping[str, Any], unsupported: Mapping[str, str], file: str) -> None:
    """Raise ValueError naming the first setting of `unsupported` (key -> what it turns on) that
    the checkpoint's `file` switches on: SIE would load it and silently compute something else."""
    for key, what in unsupported.items():
        if config.get(key):
            raise ValueError(f"{file}: {key}={config[key]!r} ({what}) is not supported by SIE")


def plain_layout(root: Path) -> CheckpointLayout | None:
    """A Hugging Face directory (sentence-transformers' layout is one with modules.json)."""
    config_path = root / "config.json"
    if not config_path.is_file():
        return None
    kind = "sentence-transformers" if (root / "modules.json").is_file() else "hf"
    return CheckpointLayout(kind=kind, root=root, config=json.loads(config_path.read_text()), tokenizer_source=root,
                            lowercase=sentence_transformers_lowercases(root))


def sentence_transformers_lowercases(root: Path) -> bool:
    """Whether sentence-transformers lowercases this model's input: `do_lower_case` in the
    sentence_bert_config.json of its Transformer module (the folder modules.json names; the root
    for a directory without modules.json). PyLate's mxbai-edge-colbert models set it on a cased
    ModernBERT tokenizer, so serving them as the tokenizer alone would give other ids."""
    modules = read_json(root / "modules.json") or []
    folder = next((m.get("path", "") for m in modules if str(m.get("type", "")).endswith("Transformer")), "")
    config = read_json(root / folder / "sentence_bert_config.json")
    return bool(config and config.get("do_lower_case"))


def not_a_model(root: Path) -> WeightsNotFound:
    if not root.exists():
        return WeightsNotFound(f"{root} does not exist (a model is a Hugging Face-layout directory with config.json)")
    return WeightsNotFound(f"{root} has no config.json: not a Hugging Face model directory")
