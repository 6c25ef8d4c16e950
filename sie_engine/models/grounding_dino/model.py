"""Grounding DINO (`GroundingDinoForObjectDetection`: IDEA-Research/grounding-dino-tiny, -base):
a Swin backbone (donut/swin.py's layers) and a BERT text encoder (bert/model.py) meeting in a
deformable-attention encoder and decoder (layers.py), with contrastive class logits against the
prompt's tokens and iteratively refined boxes.

Text: `forward(input_ids [T], positions [T], attn) -> [T, d_model]`, the prompt's phrases packed
as sequences (prompt.py: the phrase mask is their variable-length attention), the delimiters at
position 0, then `text_projection`.
Images: `forward_images(pixels [sum H*W, 3], attn, grids) -> [sum S, d_model]`: each image at its
own size (the processor keeps its aspect ratio; nothing is padded, so the result is that of the
image alone), the Swin's out stages plus strided convolutions projected to d_model and flattened
level after level (S positions per image, `level_shapes`).
`detect(sources [S, d_model], shapes, text [T, d_model], text_positions [T], phrase_mask [T, T])
-> (logits [Q, max_text_len], boxes [Q, 4])` for one image and its prompt: the encoder (fusion,
text enhancer, deformable self-attention), the top-Q proposals of the two-stage selection, the
decoder, the last layer's class logits (-inf past the prompt) and boxes (cx, cy, w, h in [0, 1]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...batch import Grids
from ...layers.weights import WeightSpec
from ..base import Backbone
from ..bert.model import BertModel
from ..donut.swin import SwinEncoder
from .config import GroundingDinoConfig
from .layers import MLP, DecoderLayer, EncoderLayer, image_position_embedding, sine_embedding, text_position_embedding
from .prompt import DELIMITERS

# the processor's largest image (shortest edge 800, longest 1,333): what a batch's memory is sized for
LARGEST_IMAGE = (800, 1333)


def level_shapes(config: GroundingDinoConfig, height: int, width: int) -> list[tuple[int, int]]:
    """An image's feature-map (h, w) per level: the Swin's patches halved per stage (rounded up, as
    its padded patch merging), then halved again by each extra stride-2 convolution."""
    p = config.swin.patch_size
    h, w = -(-height // p), -(-width // p)
    stages = []
    for _ in config.swin.depths:
        stages.append((h, w))
        h, w = (h + 1) // 2, (w + 1) // 2
    shapes = [stages[i - 1] for i in config.out_stages]
    while len(shapes) < config.feature_levels:
        h, w = shapes[-1]
        shapes.append(((h + 1) // 2, (w + 1) // 2))
    return shapes


def _swin_stages(swin: SwinEncoder, pixels: torch.Tensor) -> list[tuple[torch.Tensor, int, int]]:
    """`[1, C, H, W]` -> each stage's states `[1, h * w, C_stage]` before its downsampling, with (h, w)."""
    p = swin.config.patch_size
    height, width = pixels.shape[-2:]
    pixels = F.pad(pixels, (0, (p - width % p) % p, 0, (p - height % p) % p))
    x = swin.embeddings.patch_embeddings.projection(pixels)
    h, w = x.shape[-2:]
    x = swin.embeddings.norm(x.flatten(2).transpose(1, 2))
    out = []
    for stage in swin.encoder.layers:
        for block in stage.blocks:
            x = block(x, h, w)
        out.append((x, h, w))
        if stage.downsample is not None:
            x = stage.downsample(x, h, w)
            h, w = (h + 1) // 2, (w + 1) // 2
    return out


def _unit_grid(h: int, w: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each cell's centre over an (h, w) map in [0, 1], row-major: (x `[h * w]`, y `[h * w]`)."""
    y, x = torch.meshgrid(torch.linspace(0.5, h - 0.5, h, dtype=torch.float32, device=device),
                          torch.linspace(0.5, w - 0.5, w, dtype=torch.float32, device=device), indexing="ij")
    return x.reshape(-1) / w, y.reshape(-1) / h


class GroundingDinoDetector(Backbone):
    """Packed Grounding DINO; see the module docstring for its passes."""

    supports_images = True
    patch_grids = True  # each image arrives at its own size, `[H, W, 3]`
    weight_spec = WeightSpec(
        anchor="model.text_backbone.embeddings.word_embeddings.weight",
        # BERT's separate projections stacked into its fused QKV; renamed first so that the Swin's
        # `attention.self.query` (kept separate there) is not stacked too
        renames=tuple((f"text_backbone.encoder.layer.{i}.attention.self.",
                       f"text_backbone.encoder.layer.{i}.attention.text.") for i in range(48)),
        stacked=(("attention.text.query", "attention.qkv", 0), ("attention.text.key", "attention.qkv", 1),
                 ("attention.text.value", "attention.qkv", 2)),
        # the decoder's box head is one module shared by every layer (`decoder_bbox_embed_share`):
        # its tied copies, and the Swin's final norm, which the backbone's out stages never reach
        ignore=(*(f"bbox_embed.{i}." for i in range(1, 48)), "model.decoder.bbox_embed.",
                "model.backbone.conv_encoder.model.swin.layernorm.", "model.text_backbone.embeddings.position_ids",
                "model.text_backbone.embeddings.token_type_ids"),
    )

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """One largest image at a time through the head (its encoder's deformable samples, levels x
        points per position and head width, dominate) plus the batch's flattened maps; the Swin's
        first stage holds about a dozen states of 4x level 0's positions."""
        size = torch.empty((), dtype=dtype).element_size()
        shapes = level_shapes(config, *LARGEST_IMAGE)
        positions = sum(h * w for h, w in shapes)
        per_position = 2 * config.feature_levels * config.encoder_points * config.d_model + 8 * config.encoder_ffn_dim
        swin = 12 * 4 * shapes[0][0] * shapes[0][1] * config.swin.embed_dim
        return (positions * per_position + swin + batch_tokens * config.d_model * 4) * size

    def __init__(self, config: GroundingDinoConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        d = config.d_model
        self.model = nn.Module()
        m = self.model
        m.backbone = nn.Module()
        m.backbone.conv_encoder = nn.Module()
        m.backbone.conv_encoder.model = swin = SwinEncoder(config.swin)
        channels = {i + 1: config.swin.embed_dim * 2 ** i for i in range(len(config.swin.depths))}
        swin.hidden_states_norms = nn.ModuleDict({f"stage{i}": nn.LayerNorm(channels[i]) for i in config.out_stages})
        projections = [nn.Sequential(nn.Conv2d(channels[i], d, kernel_size=1), nn.GroupNorm(32, d))
                       for i in config.out_stages]
        last = channels[config.out_stages[-1]]
        for _ in range(config.feature_levels - len(config.out_stages)):
            projections.append(nn.Sequential(nn.Conv2d(last, d, kernel_size=3, stride=2, padding=1),
                                             nn.GroupNorm(32, d)))
            last = d
        m.input_proj_vision = nn.ModuleList(projections)
        m.text_backbone = BertModel(config.text, backend)
        m.text_projection = nn.Linear(config.text.hidden_size, d)
        m.level_embed = nn.Parameter(torch.empty(config.feature_levels, d))
        args = (d, config.encoder_ffn_dim, config.encoder_heads, config.feature_levels, config.encoder_points,
                config.activation, config.layer_norm_eps)
        m.encoder = nn.Module()
        m.encoder.layers = nn.ModuleList(EncoderLayer(*args) for _ in range(config.encoder_layers))
        m.enc_output = nn.Linear(d, d)
        m.enc_output_norm = nn.LayerNorm(d, config.layer_norm_eps)
        m.encoder_output_bbox_embed = MLP(d, d, 4, 3)
        if config.embedding_init_target:
            m.query_position_embeddings = nn.Embedding(config.num_queries, d)
        args = (d, config.decoder_ffn_dim, config.decoder_heads, config.feature_levels, config.decoder_points,
                config.activation, config.layer_norm_eps)
        m.decoder = nn.Module()
        m.decoder.layers = nn.ModuleList(DecoderLayer(*args) for _ in range(config.decoder_layers))
        m.decoder.layer_norm = nn.LayerNorm(d, config.layer_norm_eps)
        m.decoder.reference_points_head = MLP(2 * d, d, d, 2)
        self.bbox_embed = nn.ModuleList([MLP(d, d, 4, 3)])  # shared by every decoder layer
        self._delimiters: dict[torch.device, torch.Tensor] = {}  # made per device on first use (meta build)

    # ---- text ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        delimiters = self._delimiters.get(input_ids.device)
        if delimiters is None:
            delimiters = self._delimiters[input_ids.device] = torch.tensor(DELIMITERS, device=input_ids.device)
        positions = positions.masked_fill(torch.isin(input_ids, delimiters), 0)
        return self.model.text_projection(self.model.text_backbone(input_ids, positions, attn))

    # ---- images ----------------------------------------------------------------------------
    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        assert grids is not None  # patch_grids: the runner always passes them
        out, start = [], 0
        for height, width in grids:  # every image its own size: one at a time
            pixels = pixel_values[start:start + height * width].view(1, height, width, -1).permute(0, 3, 1, 2)
            start += height * width
            out.append(self.sources(pixels))
        return torch.cat(out)

    def sources(self, pixels: torch.Tensor) -> torch.Tensor:
        """`[1, 3, H, W]` -> the flattened levels `[S, d_model]` (GroundingDinoModel's `source_flatten`)."""
        swin = self.model.backbone.conv_encoder.model
        stages = _swin_stages(swin, pixels)
        maps = []
        for i in self.config.out_stages:
            x, h, w = stages[i - 1]
            x = swin.hidden_states_norms[f"stage{i}"](x)
            maps.append(x.view(1, h, w, -1).permute(0, 3, 1, 2))
        projections = self.model.input_proj_vision
        levels = [projections[i](m) for i, m in enumerate(maps)]
        extra = maps[-1]  # the first extra level reads the backbone's last map, the next ones the previous level
        for i in range(len(maps), self.config.feature_levels):
            levels.append(projections[i](extra))
            extra = levels[-1]
        return torch.cat([level[0].flatten(1).transpose(0, 1) for level in levels])

    # ---- detection -------------------------------------------------------------------------
    def detect(self, sources: torch.Tensor, shapes: Sequence[tuple[int, int]], text: torch.Tensor,
               text_positions: torch.Tensor, phrase_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One image and its prompt; see the module docstring. `phrase_mask` `[T, T]` additive (0
        within a phrase, the dtype's minimum elsewhere)."""
        shapes = list(shapes)
        m, device = self.model, sources.device
        vision, text = sources[None], text[None]  # [1, S, D], [1, T, D]
        vision_pos = torch.cat([image_position_embedding(h, w, self.config.d_model, self.config.position_temperature,
                                                         device) + m.level_embed[i]
                                for i, (h, w) in enumerate(shapes)])[None].to(vision.dtype)
        normalizer = torch.tensor([[w, h] for h, w in shapes], device=device, dtype=vision.dtype)
        points = torch.cat([torch.stack(_unit_grid(h, w, device), -1) for h, w in shapes])  # [S, 2] (x, y)
        reference = points[None, :, None].expand(-1, -1, len(shapes), -1).to(vision.dtype)
        text_pos = text_position_embedding(text_positions, self.config.d_model, vision.dtype)[None]
        for layer in m.encoder.layers:
            vision, text = layer.fusion_layer(vision, text)
            text = layer.text_enhancer_layer(text, text_pos, phrase_mask)
            vision = layer.deformable_layer(vision, vision_pos, reference, shapes, normalizer)
        return self._decode(vision, text, shapes, normalizer)

    def _proposals(self, vision: torch.Tensor, shapes: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder's states as one box proposal per position: (queries `[1, S, D]`, box logits
        `[1, S, 4]`, +inf where a proposal reaches the image's edge; `generate_encoder_output_proposals`)."""
        boxes = []
        for level, (h, w) in enumerate(shapes):
            # transformers' arithmetic to the bit ((index + 0.5) / side, not `_unit_grid`'s): the
            # top-k selection below orders these
            y, x = torch.meshgrid(torch.linspace(0, h - 1, h, dtype=torch.float32, device=vision.device),
                                  torch.linspace(0, w - 1, w, dtype=torch.float32, device=vision.device), indexing="ij")
            centres = (torch.stack((x, y), -1).view(-1, 2) + 0.5) / torch.tensor([w, h], device=vision.device)
            boxes.append(torch.cat([centres, torch.full_like(centres, 0.05 * 2.0 ** level)], -1))
        proposals = torch.cat(boxes)[None]  # [1, S, 4]
        valid = ((proposals > 0.01) & (proposals < 0.99)).all(-1, keepdim=True)
        proposals = torch.log(proposals / (1 - proposals)).masked_fill(~valid, float("inf"))
        queries = self.model.enc_output_norm(self.model.enc_output(vision.masked_fill(~valid, 0.0)))
        return queries, proposals.to(vision.dtype)

    def _decode(self, vision: torch.Tensor, text: torch.Tensor, shapes: list[tuple[int, int]],
                normalizer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m, config = self.model, self.config
        queries, proposals = self._proposals(vision, shapes)
        scores = queries @ text.transpose(-1, -2)  # [1, S, T]: the proposals' class logits
        coords = m.encoder_output_bbox_embed(queries) + proposals
        top = torch.topk(scores.max(-1)[0], min(config.num_queries, scores.shape[1]), dim=1)[1]  # [1, Q]
        reference = torch.gather(coords, 1, top.unsqueeze(-1).repeat(1, 1, 4)).sigmoid()
        if config.embedding_init_target:
            target = m.query_position_embeddings.weight[None, :top.shape[1]]
        else:
            target = torch.gather(queries, 1, top.unsqueeze(-1).repeat(1, 1, config.d_model))
        hidden, before_last = target, reference
        for layer in m.decoder.layers:
            reference_input = reference[:, :, None].expand(-1, -1, len(shapes), -1)  # valid ratios are 1
            positions = m.decoder.reference_points_head(sine_embedding(reference_input[:, :, 0], config.d_model // 2))
            hidden = layer(hidden, positions, reference_input, vision, text, shapes, normalizer)
            before_last = reference
            reference = (self.bbox_embed[0](hidden) + torch.special.logit(reference, eps=1e-5)).sigmoid()
        hidden = m.decoder.layer_norm(hidden)
        boxes = (self.bbox_embed[0](hidden) + torch.special.logit(before_last, eps=1e-5)).sigmoid()
        logits = torch.full((hidden.shape[1], config.max_text_len), float("-inf"), device=hidden.device,
                            dtype=hidden.dtype)
        logits[:, :text.shape[1]] = (hidden @ text.transpose(-1, -2))[0]
        return logits, boxes[0]


def phrase_mask(ids: np.ndarray, spans: Sequence[tuple[int, int]], device: torch.device,
                dtype: torch.dtype) -> torch.Tensor:
    """`[T, T]` additive: 0 within each phrase, the dtype's minimum elsewhere (the text enhancer's mask)."""
    allowed = torch.zeros(len(ids), len(ids), dtype=torch.bool)
    for start, end in spans:
        allowed[start:end, start:end] = True
    return (1.0 - allowed.to(dtype)).mul_(torch.finfo(dtype).min).to(device)

