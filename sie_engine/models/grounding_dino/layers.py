"""Grounding DINO's transformer blocks, read leaf to root as the paper's figure: the sine position
embeddings, multi-scale deformable attention (pure torch, `grid_sample`: transformers' fallback
arithmetic), the plain multi-head attention, the text-image fusion (bidirectional attention), the
encoder layer (fusion, text enhancer, deformable self-attention) and the decoder layer (self-,
text cross- and deformable cross-attention). Module names are transformers' so the checkpoint
loads by name.

One image at a time: every tensor carries a leading batch dimension of 1, since each image has
its own feature-map sizes and its own prompt (nothing is padded, so nothing is masked). The
deformable attention takes any batch of images sharing their map sizes (PP-DocLayout's pages,
models/pp_doclayout, all at the processor's fixed side).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...layers.blocks import activation


# ---- position embeddings -------------------------------------------------------------------
def sine_embedding(coords: torch.Tensor, features: int, temperature: int = 10000) -> torch.Tensor:
    """`[..., n]` coordinates in [0, 1] -> `[..., n * features]`, each coordinate's interleaved
    sin/cos, x and y swapped first (DETR's [y, x, ...] order; `encode_sinusoidal_position_embedding`)."""
    dim_t = torch.arange(features, dtype=torch.float32, device=coords.device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / features)
    parts = [c[..., None] * (2 * math.pi) / dim_t for c in coords.unbind(-1)]
    parts = [torch.stack((p[..., 0::2].sin(), p[..., 1::2].cos()), dim=-1).flatten(-2) for p in parts]
    if len(parts) >= 2:
        parts[0], parts[1] = parts[1], parts[0]
    return torch.cat(parts, dim=-1).to(coords.dtype)


def text_position_embedding(positions: torch.Tensor, features: int, dtype: torch.dtype) -> torch.Tensor:
    """`[T]` int64 phrase positions -> `[T, features]`. transformers casts the sinusoid back to the
    positions' integer dtype (its `.to(pos_tensor.dtype)`), truncating every value but the exact
    +-1s to 0; the checkpoints were evaluated that way, so it is kept."""
    return sine_embedding(positions[:, None].float(), features).to(torch.int64).to(dtype)


def image_position_embedding(height: int, width: int, d_model: int, temperature: int,
                             device: torch.device) -> torch.Tensor:
    """`[H * W, d_model]` row-major: the sine embedding of an unpadded map (y then x halves;
    GroundingDinoSinePositionEmbedding with an all-ones mask)."""
    half = d_model // 2
    y = torch.arange(1, height + 1, dtype=torch.float32, device=device) / (height + 1e-6) * (2 * math.pi)
    x = torch.arange(1, width + 1, dtype=torch.float32, device=device) / (width + 1e-6) * (2 * math.pi)
    dim_t = torch.arange(half, dtype=torch.float32, device=device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / half)
    pos_x, pos_y = x[:, None] / dim_t, y[:, None] / dim_t  # [W, half], [H, half]
    pos_x = torch.stack((pos_x[:, 0::2].sin(), pos_x[:, 1::2].cos()), dim=2).flatten(1)
    pos_y = torch.stack((pos_y[:, 0::2].sin(), pos_y[:, 1::2].cos()), dim=2).flatten(1)
    return torch.cat((pos_y[:, None].expand(-1, width, -1), pos_x[None].expand(height, -1, -1)), dim=-1).flatten(0, 1)


# ---- multi-scale deformable attention ------------------------------------------------------
def deformable_sample(value: torch.Tensor, shapes: list[tuple[int, int]], locations: torch.Tensor,
                      weights: torch.Tensor) -> torch.Tensor:
    """value `[B, S, heads, d]`, locations `[B, Q, heads, levels, points, 2]` in [0, 1], weights
    `[B, Q, heads, levels, points]` -> `[B, Q, heads * d]`: each head's bilinear samples of each
    level (zeros outside), weighted and summed (transformers' pure-torch MultiScaleDeformableAttention).
    Images of one batch share their map sizes (PP-DocLayout's fixed side); Grounding DINO passes one."""
    batch, _, heads, d = value.shape
    _, queries, _, levels, points, _ = locations.shape
    per_level = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * locations - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        v = per_level[level].flatten(2).transpose(1, 2).reshape(batch * heads, d, h, w)  # [B * heads, d, H, W]
        grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)  # [B * heads, Q, points, 2]
        sampled.append(F.grid_sample(v, grid, mode="bilinear", padding_mode="zeros", align_corners=False))
    weights = weights.transpose(1, 2).reshape(batch * heads, 1, queries, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1).view(batch, heads * d, queries)
    return out.transpose(1, 2)


class MultiscaleDeformableAttention(nn.Module):
    def __init__(self, d_model: int, heads: int, levels: int, points: int):
        super().__init__()
        self.heads, self.levels, self.points = heads, levels, points
        self.sampling_offsets = nn.Linear(d_model, heads * levels * points * 2)
        self.attention_weights = nn.Linear(d_model, heads * levels * points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)

    def forward(self, queries: torch.Tensor, memory: torch.Tensor, reference: torch.Tensor,
                shapes: list[tuple[int, int]], normalizer: torch.Tensor) -> torch.Tensor:
        """queries `[B, Q, D]` (position already added), memory `[B, S, D]`, reference `[B, Q, levels, 2]`
        points or `[B, Q, levels, 4]` boxes (cx, cy, w, h), normalizer `[levels, 2]` (w, h) -> `[B, Q, D]`."""
        b, q, _ = queries.shape
        value = self.value_proj(memory).view(b, memory.shape[1], self.heads, -1)
        offsets = self.sampling_offsets(queries).view(b, q, self.heads, self.levels, self.points, 2)
        weights = self.attention_weights(queries).view(b, q, self.heads, self.levels * self.points)
        weights = F.softmax(weights, -1).view(b, q, self.heads, self.levels, self.points)
        if reference.shape[-1] == 2:
            locations = reference[:, :, None, :, None, :] + offsets / normalizer[None, None, None, :, None, :]
        else:  # a box: offsets scaled by its half size, per point
            locations = (reference[:, :, None, :, None, :2]
                         + offsets / self.points * reference[:, :, None, :, None, 2:] * 0.5)
        return self.output_proj(deformable_sample(value, shapes, locations, weights))


# ---- plain attention -----------------------------------------------------------------------
class MultiheadAttention(nn.Module):
    """Separate query, key and value projections; `mask`, where given, is added to the scores."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """`[1, Q, D]`, `[1, K, D]`, `[1, K, D]`, mask `[Q, K]` additive -> `[1, Q, D]`."""
        q = self.query(queries).view(1, queries.shape[1], self.heads, -1).transpose(1, 2)
        k = self.key(keys).view(1, keys.shape[1], self.heads, -1).transpose(1, 2)
        v = self.value(values).view(1, values.shape[1], self.heads, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores + mask
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(queries.shape)
        return self.out_proj(out)


# ---- the encoder: fusion, text enhancer, deformable self-attention -------------------------
class BiMultiHeadAttention(nn.Module):
    """Image-to-text and text-to-image attention from one score matrix (GLIP's fusion)."""

    def __init__(self, d_model: int, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (width // heads) ** -0.5
        self.vision_proj = nn.Linear(d_model, width)
        self.text_proj = nn.Linear(d_model, width)
        self.values_vision_proj = nn.Linear(d_model, width)
        self.values_text_proj = nn.Linear(d_model, width)
        self.out_vision_proj = nn.Linear(width, d_model)
        self.out_text_proj = nn.Linear(width, d_model)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[1], self.heads, -1).transpose(0, 1)  # [1, N, W] -> [heads, N, W / heads]

    def forward(self, vision: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """vision `[1, S, D]`, text `[1, T, D]` -> their deltas, same shapes."""
        queries = self._heads(self.vision_proj(vision) * self.scale)
        keys = self._heads(self.text_proj(text))
        vision_values = self._heads(self.values_vision_proj(vision))
        text_values = self._heads(self.values_text_proj(text))
        scores = queries @ keys.transpose(1, 2)  # [heads, S, T]
        # transformers' stabilisation (the global max, then a clamp for float16): kept for equal bits
        scores = torch.clamp(scores - scores.max(), min=-50000, max=50000)
        transposed = scores.transpose(1, 2)
        text_scores = torch.clamp(transposed - transposed.max(dim=-1, keepdim=True)[0], min=-50000, max=50000)
        vision_out = (scores.softmax(-1) @ text_values).transpose(0, 1).reshape(1, vision.shape[1], -1)
        text_out = (text_scores.softmax(-1) @ vision_values).transpose(0, 1).reshape(1, text.shape[1], -1)
        return self.out_vision_proj(vision_out), self.out_text_proj(text_out)


class FusionLayer(nn.Module):
    def __init__(self, d_model: int, width: int, heads: int, eps: float):
        super().__init__()
        self.layer_norm_vision = nn.LayerNorm(d_model, eps)
        self.layer_norm_text = nn.LayerNorm(d_model, eps)
        self.attn = BiMultiHeadAttention(d_model, width, heads)
        self.vision_param = nn.Parameter(torch.empty(d_model))  # layer scales
        self.text_param = nn.Parameter(torch.empty(d_model))

    def forward(self, vision: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        vision, text = self.layer_norm_vision(vision), self.layer_norm_text(text)
        delta_vision, delta_text = self.attn(vision, text)
        return vision + self.vision_param * delta_vision, text + self.text_param * delta_text


class TextEnhancerLayer(nn.Module):
    """Post-norm self-attention over the prompt (each phrase within itself) and an MLP."""

    def __init__(self, d_model: int, ffn: int, heads: int, act: str, eps: float):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, heads)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.layer_norm_before = nn.LayerNorm(d_model, eps)
        self.layer_norm_after = nn.LayerNorm(d_model, eps)
        self.act = activation(act)

    def forward(self, text: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        queries = text + positions
        text = self.layer_norm_before(text + self.self_attn(queries, queries, text, mask))
        return self.layer_norm_after(text + self.fc2(self.act(self.fc1(text))))


class DeformableLayer(nn.Module):
    """Post-norm deformable self-attention over the multi-scale map and an MLP."""

    def __init__(self, d_model: int, ffn: int, heads: int, levels: int, points: int, act: str, eps: float):
        super().__init__()
        self.self_attn = MultiscaleDeformableAttention(d_model, heads, levels, points)
        self.self_attn_layer_norm = nn.LayerNorm(d_model, eps)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model, eps)
        self.act = activation(act)

    def forward(self, vision: torch.Tensor, positions: torch.Tensor, reference: torch.Tensor,
                shapes: list[tuple[int, int]], normalizer: torch.Tensor) -> torch.Tensor:
        attended = self.self_attn(vision + positions, vision, reference, shapes, normalizer)
        vision = self.self_attn_layer_norm(vision + attended)
        return self.final_layer_norm(vision + self.fc2(self.act(self.fc1(vision))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, ffn: int, heads: int, levels: int, points: int, act: str, eps: float):
        super().__init__()
        self.fusion_layer = FusionLayer(d_model, ffn // 2, heads // 2, eps)
        self.text_enhancer_layer = TextEnhancerLayer(d_model, ffn // 2, heads // 2, act, eps)
        self.deformable_layer = DeformableLayer(d_model, ffn, heads, levels, points, act, eps)


# ---- the decoder ---------------------------------------------------------------------------
class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, ffn: int, heads: int, levels: int, points: int, act: str, eps: float):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model, eps)
        self.encoder_attn_text = MultiheadAttention(d_model, heads)
        self.encoder_attn_text_layer_norm = nn.LayerNorm(d_model, eps)
        self.encoder_attn = MultiscaleDeformableAttention(d_model, heads, levels, points)
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model, eps)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model, eps)
        self.act = activation(act)

    def forward(self, queries: torch.Tensor, positions: torch.Tensor, reference: torch.Tensor, vision: torch.Tensor,
                text: torch.Tensor, shapes: list[tuple[int, int]], normalizer: torch.Tensor) -> torch.Tensor:
        """queries `[1, Q, D]`, positions `[1, Q, D]`, reference `[1, Q, levels, 4]`, the encoder's
        vision `[1, S, D]` and text `[1, T, D]` -> `[1, Q, D]`."""
        q = queries + positions
        queries = self.self_attn_layer_norm(queries + self.self_attn(q, q, queries))
        attended = self.encoder_attn_text(queries + positions, text, text)
        queries = self.encoder_attn_text_layer_norm(queries + attended)
        attended = self.encoder_attn(queries + positions, vision, reference, shapes, normalizer)
        queries = self.encoder_attn_layer_norm(queries + attended)
        return self.final_layer_norm(queries + self.fc2(self.act(self.fc1(queries))))


class MLP(nn.Module):
    """`layers` linear layers with ReLU between them (the box heads, the query position head)."""

    def __init__(self, width_in: int, width: int, width_out: int, layers: int):
        super().__init__()
        widths = [width] * (layers - 1)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip([width_in, *widths], [*widths, width_out]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x
