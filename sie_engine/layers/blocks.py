"""Leaf pieces shared by the architecture files: activations, norms."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _gelu_tanh_(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.gelu_(x, approximate="tanh")


def _silu_(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x, inplace=True)


def _quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """CLIP's sigmoid approximation of GELU."""
    return x * torch.sigmoid(1.702 * x)


def _quick_gelu_(x: torch.Tensor) -> torch.Tensor:
    return x.mul_(torch.sigmoid(1.702 * x))


# name -> (function, the same function overwriting its input). The in-place form serves the
# MLP's `[T, intermediate]` activation, the largest tensor of a layer: on CPU a fresh one per
# layer costs an allocation and a pass over cold memory.
_GELU = (F.gelu, torch.ops.aten.gelu_)
_GELU_TANH = (_gelu_tanh, _gelu_tanh_)
_SILU = (F.silu, _silu_)
ACTIVATIONS = {
    "gelu": _GELU,
    "gelu_python": _GELU,
    "gelu_new": _GELU_TANH,
    "gelu_pytorch_tanh": _GELU_TANH,
    "gelu_fast": _GELU_TANH,
    "relu": (F.relu, torch.relu_),
    "silu": _SILU,
    "swish": _SILU,
    "quick_gelu": (_quick_gelu, _quick_gelu_),
}


def activation(name: str, inplace: bool = False):
    try:
        return ACTIVATIONS[name][inplace]
    except KeyError:
        raise ValueError(f"hidden_act {name!r} is not supported "
                         f"(supported: {', '.join(sorted(ACTIVATIONS))})") from None


def residual_linear_(residual: torch.Tensor, linear: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`residual + linear(x)`, written into `residual`. `x` is `[T, in]`, `residual` `[T, out]`
    and no longer needed by the caller.

    On CPU the residual is the matmul's accumulator (addmm with beta=1), so no output tensor
    is allocated: a fresh one per layer costs an allocation and a pass over cold memory. On
    CUDA the bias rides in the matmul's epilogue and one vectorised add of equal shapes
    follows: adding a broadcast bias in place runs a slow strided kernel (11% of BERT-base's
    GPU time on an H200, 2026-11-30), and the caching allocator makes the extra output free.
    Other linear modules (int8 dynamic quantisation) take the plain path."""
    if type(linear) is not nn.Linear or x.is_cuda:
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
