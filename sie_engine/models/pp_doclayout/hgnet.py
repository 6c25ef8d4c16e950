"""HGNetV2, PP-DocLayoutV3's convolutional backbone (transformers' `HGNetV2Backbone`), read leaf to
root: the batch-normalised convolution (with PP-HGNetV2's learnable affine, where configured), its
light (1x1 then depthwise) variant, the stem, the aggregating block and the stage. Every batch
norm is frozen (inference: its running statistics, as transformers' FrozenBatchNorm2d and an
`eval()` BatchNorm2d alike). Module names are transformers' so the checkpoint loads by name.

`forward(pixels [B, 3, H, W]) -> [stage1, stage2, stage3, stage4]`, each `[B, C_i, H / s_i, W / s_i]`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...layers.blocks import activation
from .config import HGNetV2Config


class BatchNorm(nn.Module):
    """A frozen batch norm: `(x - running_mean) / sqrt(running_var + eps) * weight + bias` per channel,
    with the checkpoint's four tensors as buffers (transformers' FrozenBatchNorm2d arithmetic).
    `counted`: a norm transformers keeps as a BatchNorm2d, whose checkpoint also holds its training
    step counter (`num_batches_tracked`: loaded so every saved tensor is accounted for, never read)."""

    def __init__(self, channels: int, eps: float = 1e-5, counted: bool = False):
        super().__init__()
        self.eps = eps
        for name in ("weight", "bias", "running_mean", "running_var"):
            self.register_buffer(name, torch.zeros(channels))
        if counted:
            self.register_buffer("num_batches_tracked", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        shift = self.bias - self.running_mean * scale
        return x * scale[None, :, None, None] + shift[None, :, None, None]


class LearnableAffine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x + self.bias


class ConvLayer(nn.Module):
    """Convolution (no bias, padding `(k - 1) // 2`), batch norm, activation, affine (where both)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
                 act: str | None = "relu", affine: bool = False):
        super().__init__()
        self.convolution = nn.Conv2d(cin, cout, kernel, stride=stride, groups=groups, padding=(kernel - 1) // 2,
                                     bias=False)
        self.normalization = BatchNorm(cout)
        self.activation = activation(act) if act is not None else nn.Identity()
        self.lab = LearnableAffine() if act and affine else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lab(self.activation(self.normalization(self.convolution(x))))


class ConvLayerLight(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, affine: bool):
        super().__init__()
        self.conv1 = ConvLayer(cin, cout, 1, act=None, affine=affine)
        self.conv2 = ConvLayer(cout, cout, kernel, groups=cout, affine=affine)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x))


class Embeddings(nn.Module):
    """The stem: a strided 3x3, two 2x2 convolutions beside a max pool (each after a one-pixel pad on
    the right and bottom), concatenated, then a strided 3x3 and a 1x1."""

    def __init__(self, c: HGNetV2Config):
        super().__init__()
        (c0, c1, c2), s, act, aff = c.stem_channels, c.stem_strides, c.hidden_act, c.learnable_affine
        self.stem1 = ConvLayer(c0, c1, 3, s[0], act=act, affine=aff)
        self.stem2a = ConvLayer(c1, c1 // 2, 2, s[1], act=act, affine=aff)
        self.stem2b = ConvLayer(c1 // 2, c1, 2, s[2], act=act, affine=aff)
        self.stem3 = ConvLayer(c1 * 2, c1, 3, s[3], act=act, affine=aff)
        self.stem4 = ConvLayer(c1, c2, 1, s[4], act=act, affine=aff)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=1, ceil_mode=True)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = F.pad(self.stem1(pixels), (0, 1, 0, 1))
        branch = self.stem2b(F.pad(self.stem2a(x), (0, 1, 0, 1)))
        return self.stem4(self.stem3(torch.cat([self.pool(x), branch], dim=1)))


class BasicLayer(nn.Module):
    """`layers` convolutions in a chain, every intermediate map concatenated with the input,
    squeezed and excited by two 1x1 convolutions; residual after the first block of a stage."""

    def __init__(self, cin: int, mid: int, cout: int, layers: int, kernel: int, residual: bool, light: bool,
                 affine: bool):
        super().__init__()
        self.residual = residual
        self.layers = nn.ModuleList(
            ConvLayerLight(cin if i == 0 else mid, mid, kernel, affine) if light
            else ConvLayer(cin if i == 0 else mid, mid, kernel, affine=affine) for i in range(layers))
        self.aggregation = nn.Sequential(ConvLayer(cin + layers * mid, cout // 2, 1, affine=affine),
                                         ConvLayer(cout // 2, cout, 1, affine=affine))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        maps = [x]
        for layer in self.layers:
            maps.append(layer(maps[-1]))
        out = self.aggregation(torch.cat(maps, dim=1))
        return out + x if self.residual else out


class Stage(nn.Module):
    def __init__(self, c: HGNetV2Config, i: int):
        super().__init__()
        cin, cout = c.stage_in_channels[i], c.stage_out_channels[i]
        self.downsample = (ConvLayer(cin, cin, 3, c.stage_downsample_strides[i], groups=cin, act=None)
                           if c.stage_downsample[i] else nn.Identity())
        self.blocks = nn.ModuleList(
            BasicLayer(cin if j == 0 else cout, c.stage_mid_channels[i], cout, c.stage_layers[i],
                       c.stage_kernel_size[i], j != 0, c.stage_light_block[i], c.learnable_affine)
            for j in range(c.stage_num_blocks[i]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.downsample(x)
        for block in self.blocks:
            x = block(x)
        return x


class HGNetV2(nn.Module):
    def __init__(self, c: HGNetV2Config):
        super().__init__()
        self.embedder = Embeddings(c)
        self.encoder = nn.Module()
        self.encoder.stages = nn.ModuleList(Stage(c, i) for i in range(len(c.stage_in_channels)))

    def forward(self, pixels: torch.Tensor) -> list[torch.Tensor]:
        x, maps = self.embedder(pixels), []
        for stage in self.encoder.stages:
            x = stage(x)
            maps.append(x)
        return maps
