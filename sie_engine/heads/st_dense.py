"""sentence-transformers `Dense` modules after pooling: the projection some models put
between the pooled vector and the normalisation (LaBSE's 768 -> 768 tanh, stella's
1536 -> 1024, sentence-t5's 768 -> 768). sentence-transformers applies them, so SIE must:
without them the vectors would be of another space (and another size).

`modules.json` lists the pipeline in order; every `Dense` after the `Pooling` module is
loaded from its folder (`config.json` with in/out features, bias, activation as an import
path, `use_residual`; weights `linear.*` and `residual.*` in `model.safetensors` or
`pytorch_model.bin`). Any other module after pooling except `Normalize` is refused at
load, naming it, rather than served with different vectors.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from .common import linear, optional, tensor

# sentence-transformers stores the activation as an import path; Dense's default is Tanh.
_ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": nn.Tanh,
    "torch.nn.modules.linear.Identity": nn.Identity,
    "torch.nn.modules.activation.ReLU": nn.ReLU,
    "torch.nn.modules.activation.GELU": nn.GELU,
    "torch.nn.modules.activation.Sigmoid": nn.Sigmoid,
    "torch.nn.modules.activation.SiLU": nn.SiLU,
}
_DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"


class SentenceDense(nn.Module):
    """`act(linear(x))`, plus `x` (or its projection) when the module is residual."""

    def __init__(self, projection: nn.Linear, act: nn.Module, residual: bool, residual_projection: nn.Linear | None):
        super().__init__()
        self.projection = projection
        self.act = act
        self.residual = residual
        self.residual_projection = residual_projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.projection(x))
        if self.residual:
            out = out + (x if self.residual_projection is None else self.residual_projection(x))
        return out


def pooled_dense_stack(root: Path, device: torch.device, dtype: torch.dtype) -> nn.Sequential | None:
    """The Dense modules after pooling, in order, or None when the model has none."""
    modules_path = root / "modules.json"
    if not modules_path.is_file():
        return None
    modules = json.loads(modules_path.read_text())
    kinds = [m.get("type", "") for m in modules]
    pooling_at = next((i for i, kind in enumerate(kinds) if kind.endswith("Pooling")), None)
    if pooling_at is None:
        return None
    layers = []
    for module in modules[pooling_at + 1:]:
        kind = module.get("type", "")
        if kind.endswith("Normalize"):
            continue
        if not kind.endswith("Dense"):
            raise ValueError(f"{modules_path} has a {kind!r} module after pooling; "
                             "SIE applies only Dense and Normalize there")
        layers.append(_load_dense(root / module.get("path", ""), device, dtype))
    return nn.Sequential(*layers).eval() if layers else None


def _load_dense(folder: Path, device: torch.device, dtype: torch.dtype) -> SentenceDense:
    config = json.loads((folder / "config.json").read_text())
    if config.get("module_input_name", "sentence_embedding") != "sentence_embedding":
        raise ValueError(f"{folder}: a Dense module on {config['module_input_name']!r} after pooling is not supported")
    path = config.get("activation_function", _DEFAULT_ACTIVATION)
    if path not in _ACTIVATIONS:
        raise ValueError(f"{folder}: activation {path!r} is not supported (supported: {sorted(_ACTIVATIONS)})")
    weights = load_module_weights(folder)
    projection = linear(tensor(weights, "linear.weight"), optional(weights, "linear.bias"), device, dtype)
    if (projection.in_features, projection.out_features) != (config["in_features"], config["out_features"]):
        raise ValueError(f"{folder}: weights are {projection.out_features}x{projection.in_features}, the config says "
                         f"{config['out_features']}x{config['in_features']}")
    residual = bool(config.get("use_residual", False))
    residual_weight = optional(weights, "residual.weight")
    residual_projection = (linear(residual_weight, None, device, dtype)
                           if residual and residual_weight is not None else None)
    if residual and residual_projection is None and projection.in_features != projection.out_features:
        raise ValueError(f"{folder}: a residual Dense of another size needs `residual.weight`")
    return SentenceDense(projection, _ACTIVATIONS[path](), residual, residual_projection)


def load_module_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The tensors of a sentence-transformers module folder, in either format it saves."""
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(folder / "model.safetensors"))
    if (folder / "pytorch_model.bin").is_file():
        return torch.load(str(folder / "pytorch_model.bin"), map_location="cpu", weights_only=True)
    raise ValueError(f"{folder} has neither model.safetensors nor pytorch_model.bin")
