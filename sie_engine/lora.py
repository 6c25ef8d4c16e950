"""PEFT LoRA adapters, read as peft saves them (`adapter_config.json` + `adapter_model.safetensors`)
without importing peft: from the files to a `LoRAAdapter` over a loaded backbone's modules.

peft names each delta by the base model's module (`base_model.model.encoder.layer.0.attention.
self.query.lora_A.weight`); the backbone's `weight_spec` maps that name to its own module as it
maps the checkpoint's weights (BERT's query/key/value become shards of the fused `attention.qkv`).
Everything an adapter does is settled here, at load: a setting that changes the computation in
a way SIE does not run (DoRA, LoRA biases, modules_to_save, ...) is refused naming it, and so is
a delta for a module the family's forward does not adapt, so no delta is ever silently left out.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .card import WeightsSource
from .errors import UnsupportedArchitecture
from .layers.lora import LoRAAdapter, LoRAWeights, require_positive
from .layers.weights import WeightSpec
from .weights import resolve_source

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."

# adapter_config.json settings that change what the adapter computes beyond x @ A^T @ B^T * scaling,
# which SIE does not run: refused when set (truthy), naming the setting
UNSUPPORTED_SETTINGS = (
    "use_dora", "lora_bias", "fan_in_fan_out", "modules_to_save", "alpha_pattern", "layer_replication",
    "trainable_token_indices", "target_parameters", "use_qalora", "use_bdlora", "kasa_config",
    "velora_config", "monteclora_config", "megatron_config",
)
# BertModel's pooler, which peft adapts when target_modules names `dense`: SIE's encode heads read
# the hidden states, never the pooler, so its delta would change nothing they return
UNUSED_MODULES = ("pooler.dense",)


def adapter_dir(source: WeightsSource, what: str) -> Path:
    """The local directory of an adapter's two files (a hub repository: only those are fetched)."""
    return resolve_source(source, what, hub_patterns=[CONFIG_FILE, WEIGHTS_FILE])


def read_config(root: Path, merging: bool = False) -> dict[str, Any]:
    """adapter_config.json, checked: a LoRA adapter SIE can apply (ValueError naming what is not);
    `merging`: its deltas are merged into the base's weights at load (colpali-engine's adapters), where
    a `modules_to_save` module's saved copy simply replaces the base's."""
    path = root / CONFIG_FILE
    if not path.is_file() or not (root / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{root} is not a PEFT adapter: it needs {CONFIG_FILE} and {WEIGHTS_FILE} "
                                "(what peft's save_pretrained writes)")
    config = json.loads(path.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{path}: peft_type {config.get('peft_type')!r} is not supported (only LORA)")
    if config.get("bias", "none") != "none":
        raise ValueError(f"{path}: bias {config['bias']!r} is not supported (only 'none')")
    allowed = ("modules_to_save",) if merging else ()
    settings = [name for name in UNSUPPORTED_SETTINGS if config.get(name) and name not in allowed]
    if settings:
        raise ValueError(f"{path}: {', '.join(settings)} {'is' if len(settings) == 1 else 'are'} not supported "
                         "(SIE applies plain LoRA deltas: x @ A^T @ B^T * scaling)")
    require_positive(config, ("r", "lora_alpha"), f"{path}: ")
    return config


def scaling(config: dict[str, Any], rank: int) -> float:
    """peft's `lora_alpha / r`, or `lora_alpha / sqrt(r)` with rsLoRA; `rank` is the module's own
    (its tensors' shape: `rank_pattern` gives modules other ranks than `r`)."""
    alpha = float(config["lora_alpha"])
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def load_adapter(name: str, root: Path, backbone: nn.Module, device: torch.device,
                 dtype: torch.dtype) -> LoRAAdapter:
    """The adapter in `root` over `backbone` (a loaded one: its linear layers' shapes are checked),
    its tensors in `dtype` on `device`. Raises ValueError listing every tensor it cannot place and
    UnsupportedArchitecture for a family whose forward applies no adapters."""
    from safetensors import safe_open

    targets: tuple[str, ...] = type(backbone).lora_targets
    if not targets:
        raise UnsupportedArchitecture(f"the {type(backbone).__name__} family does not apply LoRA adapters yet "
                                      "(BERT-family encoders and Jina's XLM-RoBERTa do)")
    config = read_config(root)
    spec: WeightSpec = backbone.weight_spec
    modules = dict(backbone.named_modules())
    shards: dict[str, list[tuple[int | None, torch.Tensor, torch.Tensor]]] = {}
    errors: list[str] = []
    with safe_open(str(root / WEIGHTS_FILE), framework="pt") as tensors:
        pairs = lora_pairs(list(tensors.keys()), errors)
        for path, (a_name, b_name) in sorted(pairs.items()):
            if any(path == unused or path.endswith("." + unused) for unused in UNUSED_MODULES):
                continue
            placed = _place(path, spec, modules, targets)
            if isinstance(placed, str):
                errors.append(f"{a_name}: {placed}")
                continue
            module_name, shard = placed
            a, b = tensors.get_tensor(a_name).float(), tensors.get_tensor(b_name).float()
            problem = _shape_problem(modules[module_name], spec, module_name, shard, a, b)
            if problem:
                errors.append(f"{a_name}: {problem}")
                continue
            shards.setdefault(module_name, []).append((shard, a, b * scaling(config, a.shape[0])))
    if errors:
        raise ValueError(f"LoRA adapter {name!r} ({root}) does not fit {type(backbone).__name__}:\n  "
                         + "\n  ".join(errors))
    if not shards:
        raise ValueError(f"LoRA adapter {name!r} ({root}) adapts none of the modules the model runs")
    weights = {module: _fused(modules[module], parts, _shard_count(spec, module), device, dtype)
               for module, parts in shards.items()}
    return LoRAAdapter(name, weights)


def lora_pairs(keys: list[str], errors: list[str]) -> dict[str, tuple[str, str]]:
    """peft's module path -> (its lora_A name, its lora_B name); any other tensor is an error."""
    found: dict[str, dict[str, str]] = {}
    for key in keys:
        body = key[len(PEFT_PREFIX):] if key.startswith(PEFT_PREFIX) else key
        for part in ("lora_A", "lora_B"):
            suffix = f".{part}.weight"
            if body.endswith(suffix):
                found.setdefault(body[:-len(suffix)], {})[part] = key
                break
        else:
            errors.append(f"{key}: not a LoRA A or B matrix (DoRA magnitudes, embedding deltas and biases are "
                          "not supported)")
    pairs = {}
    for path, parts in found.items():
        if len(parts) != 2:
            errors.append(f"{path}: has {', '.join(parts)} but not both lora_A and lora_B")
            continue
        pairs[path] = (parts["lora_A"], parts["lora_B"])
    return pairs


def _place(path: str, spec: WeightSpec, modules: dict[str, nn.Module],
           targets: tuple[str, ...]) -> tuple[str, int | None] | str:
    """The backbone module (and fused shard) peft's module `path` is, or why there is none. The
    path may carry the base model's own prefix (`bert.` of BertForSequenceClassification)."""
    candidates = [path]
    if "." in path:
        candidates.append(path.split(".", 1)[1])
    for candidate in candidates:
        param, shard = spec.mapped(candidate + ".weight")
        module = param[:-len(".weight")]
        if module in modules:
            if not any(module.endswith("." + target) for target in targets):
                return f"module {module} is not one the forward adapts (it adapts {', '.join(targets)})"
            return module, shard
    return f"no module {path} in the model"


def _shard_count(spec: WeightSpec, module: str) -> int:
    counts = [index + 1 for _, fused, index in spec.stacked if module.endswith(fused)]
    return max(counts) if counts else 1


def _features(module: nn.Module) -> tuple[int, int]:
    """(in, out) of a linear layer: nn.Linear, or its int8 dynamically quantised form."""
    if isinstance(module, (nn.Linear, torch.ao.nn.quantized.dynamic.Linear)):
        return int(module.in_features), int(module.out_features)
    raise ValueError(f"{type(module).__name__} is not a linear layer")


def _shape_problem(module: nn.Module, spec: WeightSpec, name: str, shard: int | None, a: torch.Tensor,
                   b: torch.Tensor) -> str | None:
    try:
        fan_in, fan_out = _features(module)
    except ValueError as exc:
        return str(exc)
    out = fan_out // _shard_count(spec, name) if shard is not None else fan_out
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != fan_in or b.shape[0] != out or a.shape[0] != b.shape[1]:
        return (f"lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} do not fit {name} ({fan_in} in, {out} out): "
                "an adapter for another base model?")
    return None


def _fused(module: nn.Module, parts: list[tuple[int | None, torch.Tensor, torch.Tensor]], count: int,
           device: torch.device, dtype: torch.dtype) -> LoRAWeights:
    """One module's delta: a plain module's (a, b), or a fused one's stacked `a`s and block-diagonal `b`."""
    if len(parts) == 1 and parts[0][0] is None:
        _, a, b = parts[0]
        return LoRAWeights(a.to(device, dtype).contiguous(), b.to(device, dtype).contiguous())
    _, fan_out = _features(module)
    size = fan_out // count
    ranks = sum(a.shape[0] for _, a, _ in parts)
    stacked_b = torch.zeros(fan_out, ranks)
    column = 0
    for shard, a, b in sorted(parts, key=lambda part: part[0] or 0):
        index = shard or 0
        stacked_b[index * size:(index + 1) * size, column:column + a.shape[0]] = b
        column += a.shape[0]
    stacked_a = torch.cat([a for _, a, _ in sorted(parts, key=lambda part: part[0] or 0)])
    return LoRAWeights(stacked_a.to(device, dtype).contiguous(), stacked_b.to(device, dtype).contiguous())
