"""Small helpers the heads share: finding a head's tensors in a checkpoint and
building plain linear layers from them on the runner's device and dtype."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ..layers.weights import WeightLoadError


def tensor(tensors: Mapping[str, torch.Tensor], *names: str) -> torch.Tensor:
    """The first of `names` present in the checkpoint; raises naming all of them."""
    for name in names:
        if name in tensors:
            return tensors[name]
    raise WeightLoadError(f"checkpoint has none of {list(names)}: the head cannot be built from it")


def optional(tensors: Mapping[str, torch.Tensor], *names: str) -> torch.Tensor | None:
    for name in names:
        if name in tensors:
            return tensors[name]
    return None


def load_renamed(module: nn.Module, tensors: Mapping[str, torch.Tensor], root_prefix: str,
                 renames: tuple[tuple[str, str], ...]) -> tuple[list[str], list[str]]:
    """Load a head whose module names mirror its checkpoint's after a rename of prefixes (under
    `root_prefix`; names only are listed, so only the head's tensors are read). Returns the
    missing and unexpected names of a strict load, for the caller's error message."""
    state = {}
    for full_name in tensors.keys():
        if not full_name.startswith(root_prefix):
            continue
        name = full_name[len(root_prefix):]
        for old, new in renames:
            if name.startswith(old):
                state[new + name[len(old):]] = tensors[full_name]
                break
    missing, unexpected = module.load_state_dict(state, strict=False)
    return sorted(missing), sorted(unexpected)


def linear(weight: torch.Tensor, bias: torch.Tensor | None, device: torch.device, dtype: torch.dtype) -> nn.Linear:
    """`nn.Linear` holding a checkpoint's `[out, in]` weight (and `[out]` bias)."""
    out_features, in_features = weight.shape
    layer = nn.Linear(in_features, out_features, bias=bias is not None, device=device, dtype=dtype)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer.eval()


def layer_norm(weight: torch.Tensor, bias: torch.Tensor | None, eps: float, device: torch.device,
               dtype: torch.dtype) -> nn.LayerNorm:
    norm = nn.LayerNorm(weight.shape[0], eps=eps, bias=bias is not None, device=device, dtype=dtype)
    with torch.no_grad():
        norm.weight.copy_(weight)
        if bias is not None:
            norm.bias.copy_(bias)
    return norm.eval()


def ln_tensors(tensors: Mapping[str, torch.Tensor], base: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """LayerNorm weight and bias under `base` in either naming (weight/bias or gamma/beta)."""
    return tensor(tensors, f"{base}.weight", f"{base}.gamma"), optional(tensors, f"{base}.bias", f"{base}.beta")


def load_torch_file(path: Path) -> dict[str, torch.Tensor]:
    """A head's own `.pt` file (BGE-M3's `sparse_linear.pt`, `colbert_linear.pt`)."""
    if not path.is_file():
        raise ValueError(f"{path} is missing: the head's weights ship in that file")
    return torch.load(str(path), map_location="cpu", weights_only=True)
