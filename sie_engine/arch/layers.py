"""Leaf pieces shared by the architecture files: activations, norms."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_python": F.gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


def _gelu_tanh_(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.gelu_(x, approximate="tanh")


# The same functions, overwriting their input: the MLP's `[T, intermediate]` activation is the
# largest tensor of a layer, and on CPU a fresh one per layer costs an allocation and a pass
# over cold memory.
INPLACE_ACTIVATIONS = {
    "gelu": torch.ops.aten.gelu_,
    "gelu_python": torch.ops.aten.gelu_,
    "gelu_new": _gelu_tanh_,
    "gelu_pytorch_tanh": _gelu_tanh_,
    "gelu_fast": _gelu_tanh_,
    "relu": torch.relu_,
    "silu": lambda x: F.silu(x, inplace=True),
    "swish": lambda x: F.silu(x, inplace=True),
}


def activation(name: str, inplace: bool = False):
    try:
        return (INPLACE_ACTIVATIONS if inplace else ACTIVATIONS)[name]
    except KeyError:
        raise ValueError(f"hidden_act {name!r} is not supported (supported: {', '.join(sorted(ACTIVATIONS))})") from None


def residual_linear_(residual: torch.Tensor, linear: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`residual + linear(x)`, written into `residual`: the residual is the matmul's
    accumulator (addmm with beta=1), so no output tensor is allocated and no separate add
    pass runs. `x` is `[T, in]`, `residual` `[T, out]` and no longer needed by the caller.
    Other linear modules (int8 dynamic quantisation) take the plain path."""
    if type(linear) is not nn.Linear:
        return residual.add_(linear(x))
    if linear.bias is not None:
        residual.add_(linear.bias)
    return residual.addmm_(x, linear.weight.t())


class RMSNorm(nn.Module):
    """Root-mean-square norm (Qwen, Llama): x / rms(x) * weight, computed in float32."""

    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)
