"""Declarative weight loading shared by every architecture (vLLM's WeightsMapper
and stacked-params idea).

A backbone states:
- `anchor`: a checkpoint name that exists in every checkpoint of the family, used
  once to find the checkpoint's prefix (`bert.`, `roberta.`, `model.` or none);
- `renames`: (old, new) substring replacements applied to checkpoint names;
- `stacked`: (checkpoint part, fused parameter part, shard index) for fused
  projections such as QKV; each shard fills its slice of the fused weight (a checkpoint that
  keeps the fused tensor whole fills it at once).

`load_checkpoint` copies every mapped tensor into the module and fails listing
every parameter left unloaded or loaded with the wrong shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class WeightSpec:
    anchor: str
    renames: tuple[tuple[str, str], ...] = ()
    stacked: tuple[tuple[str, str, int], ...] = ()
    # Checkpoint names (after the prefix) the backbone knowingly does not use.
    ignore: tuple[str, ...] = ()

    def mapped(self, name: str) -> tuple[str, int | None]:
        """A checkpoint name (after the prefix) as the backbone names it, through the renames and
        the stacked map, and the shard of a fused parameter it fills (None: the whole parameter)."""
        for old, new in self.renames:
            name = name.replace(old, new)
        for part, fused_part, index in self.stacked:
            if part in name:
                return name.replace(part, fused_part), index
        return name, None


@dataclass
class LoadReport:
    prefix: str
    loaded: set[str] = field(default_factory=set)  # checkpoint names consumed


class WeightLoadError(ValueError):
    pass


def find_prefix(names, anchor: str) -> str:
    for name in names:
        if name.endswith(anchor):
            return name[: -len(anchor)]
    raise WeightLoadError(f"checkpoint has no tensor named like '*{anchor}': not this architecture")


def load_checkpoint(module: nn.Module, tensors: Mapping[str, torch.Tensor], spec: WeightSpec) -> LoadReport:
    """Copy the checkpoint's tensors into `module`'s parameters and buffers."""
    prefix = find_prefix(tensors.keys(), spec.anchor)
    report = LoadReport(prefix=prefix)
    params = dict(module.named_parameters())
    params.update({n: b for n, b in module.named_buffers() if n in _persistent_buffers(module)})
    filled: dict[str, int] = {}  # parameter name -> shards filled
    needed_shards = _shard_counts(params, spec)
    errors: list[str] = []
    with torch.no_grad():
        for ckpt_name in tensors:  # names first: only the backbone's tensors are read
            if not ckpt_name.startswith(prefix):
                continue
            name = ckpt_name[len(prefix):]
            if any(name.startswith(ig) or name == ig for ig in spec.ignore):
                report.loaded.add(ckpt_name)
                continue
            name, shard = spec.mapped(name)
            target = params.get(name)
            if target is None:
                continue  # not the backbone's (a head's, or unused)
            tensor = tensors[ckpt_name]
            if shard is None:
                if tuple(target.shape) != tuple(tensor.shape):
                    errors.append(f"{ckpt_name}: checkpoint shape {tuple(tensor.shape)} != parameter {name} "
                                  f"{tuple(target.shape)}")
                    continue
                target.copy_(tensor)
            else:
                size = target.shape[0] // needed_shards[name]
                view = target.narrow(0, shard * size, size)
                if tuple(view.shape) != tuple(tensor.shape):
                    errors.append(f"{ckpt_name}: checkpoint shape {tuple(tensor.shape)} != shard {shard} of {name} "
                                  f"{tuple(view.shape)}")
                    continue
                view.copy_(tensor)
            # a fused parameter whole in the checkpoint (Jina's Wqkv beside transformers' q/k/v) fills every shard
            filled[name] = filled.get(name, 0) + (1 if shard is not None else needed_shards.get(name, 1))
            report.loaded.add(ckpt_name)
    missing = [n for n in params if filled.get(n, 0) < needed_shards.get(n, 1)]
    if missing or errors:
        lines = errors + [f"{n}: not in checkpoint (prefix {prefix!r})" for n in missing]
        raise WeightLoadError("weights do not match the architecture:\n  " + "\n  ".join(lines))
    return report


def _shard_counts(params, spec: WeightSpec) -> dict[str, int]:
    counts: dict[str, int] = {}
    fused_parts: dict[str, int] = {}
    for _, fused_part, index in spec.stacked:
        fused_parts[fused_part] = max(fused_parts.get(fused_part, 0), index + 1)
    for name in params:
        for fused_part, count in fused_parts.items():
            if fused_part in name:
                counts[name] = count
    return counts


def _persistent_buffers(module: nn.Module) -> set[str]:
    names = set()
    for mod_name, mod in module.named_modules():
        for buf_name in mod._buffers:
            if buf_name not in mod._non_persistent_buffers_set:
                names.add(f"{mod_name}.{buf_name}" if mod_name else buf_name)
    return names


def materialize(module: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """Allocate a module built on the meta device (no init cost) on `device`."""
    module = module.to_empty(device=device)
    return module.to(dtype=dtype)
