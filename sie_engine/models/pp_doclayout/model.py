"""PP-DocLayoutV3 (`PPDocLayoutV3ForObjectDetection`: PaddlePaddle/PP-DocLayoutV3_safetensors), a
layout detector: RT-DETR with a mask branch and a reading-order head. Read leaf to root: the
backbone (hgnet.py), the hybrid encoder (encoder.py), then here the decoder layer (self-attention,
multi-scale deformable cross-attention over the decoder's levels: grounding_dino/layers.py's,
batched), the global pointer (reading order), the query selection and the model.

`forward_images(pixels [B, 3, S, S]) -> [B * Q, labels + 4 + Q]`: per query (Q `num_queries`) its
class logits, its box (centre x, y, width, height in [0, 1] of the image) and its row of the
order logits, what transformers' `post_process_object_detection` reads (`logits`, `pred_boxes`,
`order_logits`). Every image of a batch is resized to the processor's fixed side, so the batch
runs as one: nothing is padded, and an image's rows never depend on the others'.

The query selection (eval): each encoder position's class scores and anchored box; the `num_queries`
best positions become the decoder's queries, their reference boxes the boxes of their masks
(`mask_enhanced`: each query's mask prototype product over the mask features, thresholded at 0);
each decoder layer refines the boxes; the last layer's normed queries give the logits, the order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...attention import AttentionMetadata
from ...batch import Grids
from ...layers.blocks import activation
from ...layers.weights import WeightSpec
from ..base import Backbone
from ..grounding_dino.layers import MLP, MultiscaleDeformableAttention
from .config import PPDocLayoutConfig
from .encoder import BatchNorm, HybridEncoder, SelfAttention
from .hgnet import HGNetV2

ANCHOR_GRID = 0.05  # transformers' generate_anchors grid_size: an anchor's side at level 0, doubled per level
ANCHOR_MARGIN = 1e-2  # anchors within this of the image's edge are invalid (their positions masked out)


class DecoderLayer(nn.Module):
    def __init__(self, c: PPDocLayoutConfig):
        super().__init__()
        d = c.d_model
        self.self_attn = SelfAttention(d, c.decoder_heads)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.encoder_attn = MultiscaleDeformableAttention(d, c.decoder_heads, c.num_feature_levels,
                                                          c.decoder_points)
        self.encoder_attn_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        self.fc1 = nn.Linear(d, c.decoder_ffn_dim)
        self.fc2 = nn.Linear(c.decoder_ffn_dim, d)
        self.act = activation(c.decoder_activation)
        self.final_layer_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, position: torch.Tensor, reference: torch.Tensor, memory: torch.Tensor,
                shapes: list[tuple[int, int]], normalizer: torch.Tensor) -> torch.Tensor:
        """x, position `[B, Q, D]`, reference `[B, Q, 1, 4]` boxes, memory `[B, S, D]` -> `[B, Q, D]`."""
        x = self.self_attn_layer_norm(x + self.self_attn(x, position))
        x = self.encoder_attn_layer_norm(x + self.encoder_attn(x + position, memory, reference, shapes, normalizer))
        return self.final_layer_norm(x + self.fc2(self.act(self.fc1(x))))


class GlobalPointer(nn.Module):
    """Reading order: each query pair's score `q_i . k_j / sqrt(size)`, the lower triangle (j <= i)
    set to -1e4 (transformers' `PPDocLayoutV3GlobalPointer`)."""

    def __init__(self, d_model: int, size: int):
        super().__init__()
        self.size = size
        self.dense = nn.Linear(d_model, size * 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k = self.dense(x).view(b, n, 2, self.size).unbind(2)
        logits = q @ k.transpose(-1, -2) / self.size ** 0.5
        lower = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        return logits.masked_fill(lower, -1e4)


def inverse_sigmoid(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    x = x.clamp(min=0, max=1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


def anchors(shapes: list[tuple[int, int]], device: torch.device,
            dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`[S, 4]` anchor logits (cell centres, sides doubling per level) and `[S, 1]` validity (an
    anchor well inside the image); invalid anchors are the dtype's max (transformers' generate_anchors)."""
    out = []
    for level, (h, w) in enumerate(shapes):
        gy, gx = torch.meshgrid(torch.arange(h, device=device).to(dtype), torch.arange(w, device=device).to(dtype),
                                indexing="ij")
        xy = torch.stack([(gx + 0.5) / w, (gy + 0.5) / h], -1)
        wh = torch.ones_like(xy) * ANCHOR_GRID * (2.0 ** level)
        out.append(torch.cat([xy, wh], -1).reshape(h * w, 4))
    boxes = torch.cat(out)
    valid = ((boxes > ANCHOR_MARGIN) & (boxes < 1 - ANCHOR_MARGIN)).all(-1, keepdim=True)
    logits = torch.log(boxes / (1 - boxes))
    return torch.where(valid, logits, torch.full((), torch.finfo(dtype).max, dtype=dtype, device=device)), valid


def mask_boxes(masks: torch.Tensor) -> torch.Tensor:
    """`[B, Q, H, W]` bool -> `[B, Q, 4]` each mask's bounding box (cx, cy, w, h in [0, 1]; zeros
    for an empty mask), as transformers' `mask_to_box_coordinate`."""
    h, w = masks.shape[-2:]
    dtype = torch.float32
    ys, xs = torch.meshgrid(torch.arange(h, device=masks.device).to(dtype),
                            torch.arange(w, device=masks.device).to(dtype), indexing="ij")
    big = torch.tensor(torch.finfo(dtype).max, device=masks.device)
    x_masked, y_masked = xs * masks, ys * masks
    x_max = x_masked.flatten(-2).max(-1).values + 1
    y_max = y_masked.flatten(-2).max(-1).values + 1
    x_min = torch.where(masks, x_masked, big).flatten(-2).min(-1).values
    y_min = torch.where(masks, y_masked, big).flatten(-2).min(-1).values
    box = torch.stack([x_min, y_min, x_max, y_max], -1) * masks.any(dim=(-2, -1))[..., None]
    x0, y0, x1, y1 = (box / torch.tensor([w, h, w, h], device=masks.device, dtype=dtype)).unbind(-1)
    return torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], -1)


def _projection(cin: int, cout: int, eps: float, kernel: int = 1, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
                         BatchNorm(cout, eps, counted=True))


class PPDocLayoutDetector(Backbone):
    """PP-DocLayoutV3; see the module docstring."""

    supports_images = True
    weight_spec = WeightSpec(
        anchor="model.enc_score_head.weight",
        # the names transformers' modules have (its loader maps them to the saved ones, which these are)
        renames=(("encoder.aifi.", "encoder.encoder."), ("self_attn.o_proj.", "self_attn.out_proj."),
                 (".mlp.fc", ".fc")),
        # training's denoising queries' class table; the decoder's heads where tied to the encoder's
        ignore=("model.denoising_class_embed.", "model.decoder.class_embed.", "model.decoder.bbox_embed."),
    )

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """The backbone's first stages dominate: about a dozen maps of the stem's width at a quarter
        of the side, per image (`batch_tokens` counts an image as its encoder positions)."""
        size = torch.empty((), dtype=dtype).element_size()
        h, w = config.image_size
        per_image = 12 * (h // 4) * (w // 4) * max(config.backbone.stage_out_channels[0], config.x4_feat_dim)
        images = max(1, batch_tokens // encoder_positions(config))
        return images * per_image * size

    def __init__(self, config: PPDocLayoutConfig, backend: Any = None):
        super().__init__()
        self.config = c = config
        d, eps = c.d_model, c.batch_norm_eps
        self.model = m = nn.Module()
        m.backbone = nn.Module()
        m.backbone.model = HGNetV2(c.backbone)
        m.encoder_input_proj = nn.ModuleList(_projection(ch, c.encoder_hidden_dim, 1e-5)  # BatchNorm2d's default eps
                                             for ch in c.backbone.stage_out_channels[1:])
        m.encoder = HybridEncoder(c)
        m.enc_output = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d, eps=c.layer_norm_eps))
        m.enc_score_head = nn.Linear(d, len(c.id2label))
        m.enc_bbox_head = MLP(d, d, 4, 3)
        projections = [_projection(ch, d, eps) for ch in c.decoder_in_channels]
        ch = c.decoder_in_channels[-1]
        for _ in range(c.num_feature_levels - len(c.decoder_in_channels)):
            projections.append(_projection(ch, d, eps, kernel=3, stride=2))
            ch = d
        m.decoder_input_proj = nn.ModuleList(projections)
        m.decoder = nn.Module()
        m.decoder.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        m.decoder.query_pos_head = MLP(4, 2 * d, d, 2)
        if not c.tie_word_embeddings:  # tied (every published config): the encoder's heads serve the decoder
            m.decoder.class_embed = nn.Linear(d, len(c.id2label))
            m.decoder.bbox_embed = MLP(d, d, 4, 3)
        m.decoder_order_head = nn.ModuleList(nn.Linear(d, d) for _ in range(c.decoder_layers))
        m.decoder_global_pointer = GlobalPointer(d, c.global_pointer_head_size)
        m.decoder_norm = nn.LayerNorm(d, eps=c.layer_norm_eps)
        m.mask_query_head = MLP(d, d, c.num_prototypes, 3)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise TypeError("PP-DocLayout reads images only")  # extract's layout mode refuses text items first

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata | None = None,
                       grids: Grids | None = None) -> torch.Tensor:
        logits, boxes, order = self.detect(pixel_values)
        return torch.cat([logits, boxes, order], dim=-1).flatten(0, 1)

    def _class_embed(self) -> nn.Module:
        return self.model.enc_score_head if self.config.tie_word_embeddings else self.model.decoder.class_embed

    def _bbox_embed(self) -> nn.Module:
        return self.model.enc_bbox_head if self.config.tie_word_embeddings else self.model.decoder.bbox_embed

    def detect(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`[B, 3, H, W]` -> logits `[B, Q, labels]`, boxes `[B, Q, 4]`, order logits `[B, Q, Q]`."""
        m = self.model
        stages = m.backbone.model(pixels)
        levels = [proj(x) for proj, x in zip(m.encoder_input_proj, stages[1:])]
        pan, mask_feat = m.encoder(levels, stages[0])
        sources = [proj(x) for proj, x in zip(m.decoder_input_proj, pan)]
        for proj in m.decoder_input_proj[len(sources):]:  # extra levels: all read the last map (transformers')
            sources.append(proj(pan[-1]))
        shapes = [(int(s.shape[2]), int(s.shape[3])) for s in sources]
        memory = torch.cat([s.flatten(2).transpose(1, 2) for s in sources], 1)  # [B, S, D]
        target, reference = self._select_queries(memory, shapes, mask_feat)
        return self._decode(target, reference, memory, shapes, mask_feat)

    def _select_queries(self, memory: torch.Tensor, shapes: list[tuple[int, int]],
                        mask_feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The decoder's queries `[B, Q, D]` and their reference boxes `[B, Q, 4]` in [0, 1]."""
        m = self.model
        anchor, valid = anchors(shapes, memory.device, memory.dtype)
        output = m.enc_output(valid.to(memory.dtype) * memory)
        scores = m.enc_score_head(output)
        top = torch.topk(scores.max(-1).values, self.config.num_queries, dim=1).indices  # [B, Q]
        target = output.gather(1, top[..., None].expand(-1, -1, output.shape[-1]))
        prototypes = m.mask_query_head(m.decoder_norm(target))  # [B, Q, P]
        masks = torch.bmm(prototypes, mask_feat.flatten(2)).view(*top.shape, *mask_feat.shape[2:])
        return target, mask_boxes(masks > 0).to(memory.dtype)

    def _decode(self, target: torch.Tensor, reference: torch.Tensor, memory: torch.Tensor,
                shapes: list[tuple[int, int]], mask_feat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        m = self.model
        # transformers round-trips the mask boxes through logits before its first sigmoid
        reference = torch.sigmoid(inverse_sigmoid(reference))
        normalizer = torch.tensor([[w, h] for h, w in shapes], device=memory.device, dtype=memory.dtype)
        x = target
        for layer in m.decoder.layers:
            x = layer(x, m.decoder.query_pos_head(reference), reference[:, :, None], memory, shapes, normalizer)
            reference = torch.sigmoid(self._bbox_embed()(x) + inverse_sigmoid(reference))
        queries = m.decoder_norm(x)
        order = m.decoder_global_pointer(m.decoder_order_head[len(m.decoder.layers) - 1](queries))
        return self._class_embed()(queries), reference, order


def encoder_positions(config: PPDocLayoutConfig) -> int:
    """The decoder's memory positions for one image (every level's cells): what an image counts as."""
    h, w = config.image_size
    total, (sh, sw) = 0, (h, w)
    for stride in config.feat_strides:
        total += (h // stride) * (w // stride)
        sh, sw = h // stride, w // stride
    for _ in range(config.num_feature_levels - len(config.feat_strides)):
        sh, sw = (sh + 1) // 2, (sw + 1) // 2
        total += sh * sw
    return total
