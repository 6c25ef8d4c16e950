"""PP-DocLayoutV3's hybrid encoder (RT-DETR's, with a mask branch), read leaf to root: the
batch-normalised convolutions, the RepVGG block and CSP layer of the FPN/PAN, the 2D sine position
embedding and the AIFI transformer layer over the coarsest level, the mask-feature FPN. Module
names are transformers' (`PPDocLayoutV3HybridEncoder`) so the checkpoint loads by name.

`forward(levels [3 x [B, C, H_l, W_l]], x4 [B, C4, H/4, W/4]) -> (pan levels, mask_feat [B, P, H/4, W/4])`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...layers.blocks import activation
from .config import PPDocLayoutConfig
from .hgnet import BatchNorm


class ConvNormLayer(nn.Module):
    """Convolution (no bias), batch norm, optional activation (`PPDocLayoutV3ConvNormLayer`)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, eps: float, act: str | None = None,
                 padding: int | None = None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, padding=(kernel - 1) // 2 if padding is None else padding,
                              bias=False)
        self.norm = BatchNorm(cout, eps, counted=True)
        self.activation = activation(act) if act is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.norm(self.conv(x)))


class ConvLayer(nn.Module):
    """The mask branch's convolution (`PPDocLayoutV3ConvLayer`: padding `k // 2`, default-eps norm, SiLU)."""

    def __init__(self, cin: int, cout: int, kernel: int = 3):
        super().__init__()
        self.convolution = nn.Conv2d(cin, cout, kernel, padding=kernel // 2, bias=False)
        self.normalization = BatchNorm(cout, counted=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.normalization(self.convolution(x)))


class RepVggBlock(nn.Module):
    def __init__(self, c: PPDocLayoutConfig):
        super().__init__()
        hidden = int(c.encoder_hidden_dim * c.hidden_expansion)
        self.conv1 = ConvNormLayer(hidden, hidden, 3, 1, c.batch_norm_eps, padding=1)
        self.conv2 = ConvNormLayer(hidden, hidden, 1, 1, c.batch_norm_eps, padding=0)
        self.activation = activation(c.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.conv1(x) + self.conv2(x))


class CSPRepLayer(nn.Module):
    """Two 1x1 branches of the concatenated pair, one through three RepVGG blocks, summed."""

    def __init__(self, c: PPDocLayoutConfig):
        super().__init__()
        cin, cout, eps, act = c.encoder_hidden_dim * 2, c.encoder_hidden_dim, c.batch_norm_eps, c.activation
        hidden = int(cout * c.hidden_expansion)
        self.conv1 = ConvNormLayer(cin, hidden, 1, 1, eps, act)
        self.conv2 = ConvNormLayer(cin, hidden, 1, 1, eps, act)
        self.bottlenecks = nn.Sequential(*[RepVggBlock(c) for _ in range(3)])
        self.conv3 = ConvNormLayer(hidden, cout, 1, 1, eps, act) if hidden != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(self.bottlenecks(self.conv1(x)) + self.conv2(x))


def sine_position_embedding(height: int, width: int, dim: int, temperature: float, device: torch.device,
                            dtype: torch.dtype) -> torch.Tensor:
    """`[H * W, dim]` row-major, `[sin_h | cos_h | sin_w | cos_w]`, computed in float64 as transformers'
    `build_2d_sinusoidal_position_embedding` (then cast)."""
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64, device=device) / quarter)
    grid_h, grid_w = torch.meshgrid(torch.arange(height, dtype=torch.float64, device=device),
                                    torch.arange(width, dtype=torch.float64, device=device), indexing="ij")
    emb_h, emb_w = grid_h.flatten().outer(omega), grid_w.flatten().outer(omega)
    return torch.cat([emb_h.sin(), emb_h.cos(), emb_w.sin(), emb_w.cos()], dim=1).to(dtype)


class SelfAttention(nn.Module):
    """Multi-head attention whose queries and keys (not values) read the position embedding."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, position: torch.Tensor | None) -> torch.Tensor:
        """x `[B, N, D]`, position `[B or 1, N, D]` -> `[B, N, D]`."""
        b, n, d = x.shape
        qk = x + position if position is not None else x
        q = self.q_proj(qk).view(b, n, self.heads, -1).transpose(1, 2)  # [B, heads, N, d]
        k = self.k_proj(qk).view(b, n, self.heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.heads, -1).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        return self.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class EncoderLayer(nn.Module):
    """Post-norm: attention, then the feed-forward, each added and layer-normed (`normalize_before: false`)."""

    def __init__(self, c: PPDocLayoutConfig):
        super().__init__()
        d = c.encoder_hidden_dim
        self.self_attn = SelfAttention(d, c.encoder_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.fc1 = nn.Linear(d, c.encoder_ffn_dim)
        self.fc2 = nn.Linear(c.encoder_ffn_dim, d)
        self.act = activation(c.encoder_activation)
        self.final_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        x = self.self_attn_layer_norm(x + self.self_attn(x, position))
        return self.final_layer_norm(x + self.fc2(self.act(self.fc1(x))))


class AIFILayer(nn.Module):
    def __init__(self, c: PPDocLayoutConfig):
        super().__init__()
        self.dim, self.temperature = c.encoder_hidden_dim, c.positional_encoding_temperature
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, d, h, w = x.shape
        position = sine_position_embedding(h, w, self.dim, self.temperature, x.device, x.dtype)[None]
        x = x.flatten(2).transpose(1, 2)  # [B, H * W, D]
        for layer in self.layers:
            x = layer(x, position)
        return x.transpose(1, 2).reshape(b, d, h, w)


class ScaleHead(nn.Module):
    """A level's 3x3 convolutions, each followed by a 2x bilinear upsampling, up to the finest stride."""

    def __init__(self, cin: int, channels: int, stride: int, base_stride: int):
        super().__init__()
        self.layers = nn.ModuleList()
        for k in range(max(1, int(math.log2(stride) - math.log2(base_stride)))):
            self.layers.append(ConvLayer(cin if k == 0 else channels, channels))
            if stride != base_stride:
                self.layers.append(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MaskFeatFPN(nn.Module):
    def __init__(self, cin: int, strides: list[int], channels: int, cout: int):
        super().__init__()
        self.order = sorted(range(len(strides)), key=lambda i: strides[i])  # finest first (numpy's argsort)
        ordered = [strides[i] for i in self.order]
        self.scale_heads = nn.ModuleList(ScaleHead(cin, channels, s, ordered[0]) for s in ordered)
        self.output_conv = ConvLayer(channels, cout)

    def forward(self, levels: list[torch.Tensor]) -> torch.Tensor:
        x = [levels[i] for i in self.order]
        out = self.scale_heads[0](x[0])
        for head, level in zip(self.scale_heads[1:], x[1:]):
            out = out + F.interpolate(head(level), size=out.shape[2:], mode="bilinear", align_corners=False)
        return self.output_conv(out)


class EncoderMaskOutput(nn.Module):
    def __init__(self, channels: int, prototypes: int):
        super().__init__()
        self.base_conv = ConvLayer(channels, channels)
        self.conv = nn.Conv2d(channels, prototypes, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.base_conv(x))


class HybridEncoder(nn.Module):
    def __init__(self, c: PPDocLayoutConfig):
        super().__init__()
        d, eps, act, stages = c.encoder_hidden_dim, c.batch_norm_eps, c.activation, len(c.feat_strides) - 1
        self.encode_proj_layers = c.encode_proj_layers if c.encoder_layers > 0 else ()
        # transformers' `aifi`, saved under RT-DETR's name `encoder` (its checkpoint conversion's reverse)
        self.encoder = nn.ModuleList(AIFILayer(c) for _ in c.encode_proj_layers)
        self.lateral_convs = nn.ModuleList(ConvNormLayer(d, d, 1, 1, eps, act) for _ in range(stages))
        self.fpn_blocks = nn.ModuleList(CSPRepLayer(c) for _ in range(stages))
        self.downsample_convs = nn.ModuleList(ConvNormLayer(d, d, 3, 2, eps, act) for _ in range(stages))
        self.pan_blocks = nn.ModuleList(CSPRepLayer(c) for _ in range(stages))
        mask_in, mask_out = c.mask_feature_channels
        self.mask_feature_head = MaskFeatFPN(d, list(c.feat_strides), mask_in, mask_out)
        self.encoder_mask_lateral = ConvLayer(c.x4_feat_dim, mask_out)
        self.encoder_mask_output = EncoderMaskOutput(mask_out, c.num_prototypes)

    def forward(self, levels: list[torch.Tensor], x4: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        levels = list(levels)
        for aifi, index in zip(self.encoder, self.encode_proj_layers):
            levels[index] = aifi(levels[index])
        # top-down FPN: from the coarsest level, each lateral map upsampled and fused with the next finer
        fpn = [levels[-1]]
        for idx, (lateral, block) in enumerate(zip(self.lateral_convs, self.fpn_blocks)):
            fpn[-1] = lateral(fpn[-1])
            up = F.interpolate(fpn[-1], scale_factor=2.0, mode="nearest")
            fpn.append(block(torch.cat([up, levels[len(levels) - idx - 2]], dim=1)))
        fpn.reverse()
        # bottom-up PAN
        pan = [fpn[0]]
        for idx, (down, block) in enumerate(zip(self.downsample_convs, self.pan_blocks)):
            pan.append(block(torch.cat([down(pan[-1]), fpn[idx + 1]], dim=1)))
        mask = F.interpolate(self.mask_feature_head(pan), scale_factor=2, mode="bilinear", align_corners=False)
        mask = self.encoder_mask_output(mask + self.encoder_mask_lateral(x4))
        return pan, mask
