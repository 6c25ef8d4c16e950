"""GLM-OCR (zai-org/GLM-OCR: transformers' `GlmOcrForConditionalGeneration`): the vision tower and
connector (vision.py) over each page at its own resolution, the page's image features where the
processor put its `<|image|>` placeholders, and the GLM decoder, which generates the page's text.

Read top to bottom: the config, the decoder's rotary positions, its layers, the model.

- The decoder (transformers' GlmOcrTextModel, GLM-4's blocks): RMSNorm, attention (q / k / v
  without biases, grouped-query), RMSNorm of the attention's output before the residual; RMSNorm,
  the SwiGLU MLP (`gate_up_proj` as the checkpoint fuses it), RMSNorm before the residual.
- Rotary positions are GLM's interleaved layout (each channel pair 2j, 2j+1 rotates by frequency j,
  over the first `partial_rotary_factor` of each head's channels) and M-RoPE: frequency j rotates by
  the temporal, height or width position as `mrope_section` assigns its block. Positions are
  transformers' `get_rope_index`: the prompt's tokens before the page count 0, 1, ... on all three
  axes, the page's image features sit at (start, start + row, start + column) of their merge grid,
  the tokens after it count on from start + max(rows, columns); every generated token then takes
  its place in the sequence plus the page's `rope_delta` (max position + 1 - prompt length), on
  all three axes.
- Checkpoints carry a multi-token-prediction layer after the last (`layers.{num_hidden_layers}`,
  `num_nextn_predict_layers`), which transformers ignores for `generate`: SIE ignores it too.

The decoder runs through the decode cache (sie_engine/generation/cache.py): `decode` takes a
step's input embeddings `[rows, Q, H]` and M-RoPE positions `[3, rows, Q]`, and its attention
layers call `cache.attend_self`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ...attention import AttentionBackend, default_scale
from ...batch import Grids
from ...generation.cache import DecodeCache
from ...generation.head import GenerationHead
from ...images import MAX_RESIZED_PIXELS
from ...layers.blocks import RMSNorm
from ...layers.weights import WeightSpec
from ..colqwen2.model import mrope_positions
from ..page_decoder import PageDecoderLM
from ..qwen.model import QwenMLP
from .vision import GlmOcrVisionConfig, VisionTower

# transformers' GlmOcrTextRotaryEmbedding where rope_parameters names no mrope_section
DEFAULT_MROPE_SECTION = (8, 12, 12)


@dataclass(frozen=True)
class MRopeDecoderConfig:
    """The text_config of a decoder with M-RoPE (GLM-OCR's, PaddleOCR-VL's), as transformers' config
    class completes it; subclasses add what their decoder has of its own."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    max_position_embeddings: int
    rope_theta: float
    mrope_section: tuple[int, ...]  # frequencies per axis (temporal, height, width), repeating

    @staticmethod
    def fields(text: Mapping[str, Any], default_sections: tuple[int, ...] | None,
               rotary_fraction: float = 1.0) -> dict[str, Any]:
        """The shared fields of `text` (default rotary only; `mrope_section`, or `default_sections`
        where it names none, covering the head's rotary channels: `rotary_fraction` of head_dim)."""
        rope = text.get("rope_parameters") or {}
        if (rope.get("rope_type") or "default") != "default":
            raise ValueError(f"text_config.rope_parameters.rope_type={rope.get('rope_type')!r} is not supported "
                             "(only 'default')")
        heads = text["num_attention_heads"]
        head_dim = text.get("head_dim") or text["hidden_size"] // heads
        rotary_dim = int(head_dim * rotary_fraction)
        sections = tuple(int(s) for s in rope.get("mrope_section") or default_sections or ())
        if not sections:
            raise ValueError("text_config.rope_parameters names no mrope_section: the decoder's attention rotates "
                             "by it (a published config's rope_scaling.mrope_section)")
        if 2 * sum(sections) != rotary_dim:
            raise ValueError(f"text_config.rope_parameters.mrope_section {list(sections)} covers {2 * sum(sections)} "
                             f"channels; the head's rotary channels are {rotary_dim}")
        return dict(vocab_size=text["vocab_size"], hidden_size=text["hidden_size"],
                    intermediate_size=text["intermediate_size"], num_hidden_layers=text["num_hidden_layers"],
                    num_attention_heads=heads, num_key_value_heads=text.get("num_key_value_heads") or heads,
                    head_dim=head_dim, hidden_act=text["hidden_act"], rms_norm_eps=text["rms_norm_eps"],
                    max_position_embeddings=text["max_position_embeddings"],
                    rope_theta=float(rope["rope_theta"]), mrope_section=sections)


@dataclass(frozen=True)
class GlmOcrTextConfig(MRopeDecoderConfig):
    rotary_dim: int  # channels of a head that rotate: head_dim * partial_rotary_factor

    @staticmethod
    def from_hf(text: Mapping[str, Any]) -> GlmOcrTextConfig:
        fraction = (text.get("rope_parameters") or {}).get("partial_rotary_factor", 1.0)
        fields = MRopeDecoderConfig.fields(text, DEFAULT_MROPE_SECTION, fraction)
        return GlmOcrTextConfig(**fields, rotary_dim=int(fields["head_dim"] * fraction))


@dataclass(frozen=True)
class GlmOcrConfig:
    """config.json of a GLM-OCR checkpoint, completed by transformers' GlmOcrConfig (a published
    config.json lists only what differs from its defaults)."""

    vision: GlmOcrVisionConfig
    text: GlmOcrTextConfig
    image_token_id: int

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> GlmOcrConfig:
        from transformers import GlmOcrConfig as Reference

        if config.get("model_type") != "glm_ocr":
            raise ValueError(f"model_type={config.get('model_type')!r} is not a GLM-OCR (glm_ocr) checkpoint")
        full = Reference.from_dict(dict(config))
        vision = GlmOcrVisionConfig.from_hf(full.vision_config.to_dict())
        text = GlmOcrTextConfig.from_hf(full.text_config.to_dict())
        if vision.out_hidden_size != text.hidden_size:
            raise ValueError(f"vision_config.out_hidden_size {vision.out_hidden_size} != text_config.hidden_size "
                             f"{text.hidden_size}: the image features are the decoder's input")
        return GlmOcrConfig(vision=vision, text=text, image_token_id=int(full.image_token_id))

    @property
    def max_seq_len(self) -> int:
        """Decoder positions: the prompt (image features included) plus generated tokens."""
        return self.text.max_position_embeddings


def rope_index(ids: Sequence[int], image_token_id: int, grid: tuple[int, int],
               merge: int) -> tuple[np.ndarray, int]:
    """A prompt with one page's image features (a contiguous run of `image_token_id`) -> its M-RoPE
    positions `[3, L]` and rope delta, as transformers' `get_rope_index` computes them."""
    places = np.flatnonzero(np.asarray(ids) == image_token_id)
    rows, columns = grid[0] // merge, grid[1] // merge
    if len(places) != rows * columns or (len(places) and places[-1] - places[0] + 1 != len(places)):
        raise ValueError(f"the prompt holds {len(places)} image placeholders; the page has {rows * columns} "
                         "image features, in one run")
    before = int(places[0])
    positions = mrope_positions(before, (grid,), len(ids) - before - len(places), merge)
    return positions, int(positions.max()) + 1 - len(ids)


class InterleavedMRope:
    """GLM's rotary tables: `[3, rows, Q]` positions -> float32 (cos, sin) `[rows, Q, rotary_dim]`,
    frequency j on channels 2j and 2j + 1, by the axis its `mrope_section` block names. The inverse
    frequencies are computed as transformers computes them (float32, on the host), once per device."""

    def __init__(self, config: GlmOcrTextConfig):
        self.rotary_dim, self.base = config.rotary_dim, config.rope_theta
        self.axis = [i % 3 for i, width in enumerate(config.mrope_section) for _ in range(width)]  # [rotary_dim / 2]
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def _table(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        cached = self._tables.get(device)
        if cached is None:
            exponents = torch.arange(0, self.rotary_dim, 2, dtype=torch.int64).float() / self.rotary_dim
            cached = ((1.0 / (self.base ** exponents)).to(device), torch.tensor(self.axis, device=device))
            self._tables[device] = cached
        return cached

    def __call__(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq, axis = self._table(positions.device)
        freqs = positions.float()[..., None] * inv_freq  # [3, rows, Q, F]
        chosen = freqs.gather(0, axis.expand(1, *freqs.shape[1:])).squeeze(0)  # [rows, Q, F]
        emb = chosen.repeat_interleave(2, dim=-1)  # [rows, Q, rotary_dim]
        return emb.cos(), emb.sin()


def apply_interleaved_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `[rows, heads, Q, D]` queries or keys by `[rows, Q, R]` tables (R <= D channels rotate,
    the rest pass): each pair (x[2j], x[2j + 1]) -> (x[2j] cos - x[2j + 1] sin, x[2j + 1] cos + x[2j] sin).
    The math runs in float32; the result has x's dtype."""
    r = cos.shape[-1]
    rot = x[..., :r].float()
    pairs = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)  # GLM's rotate_half
    out = rot * cos[:, None] + pairs * sin[:, None]
    return torch.cat((out.to(x.dtype), x[..., r:]), dim=-1)


class GlmTextAttention(nn.Module):
    def __init__(self, config: GlmOcrTextConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=False)
        self.kv_proj = nn.Linear(config.hidden_size, 2 * self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], cache: DecodeCache) -> torch.Tensor:
        rows, q_len, _ = x.shape
        q = self.q_proj(x).view(rows, q_len, self.heads, self.head_dim).transpose(1, 2)  # [rows, heads, Q, D]
        kv = self.kv_proj(x).view(rows, q_len, 2, self.kv_heads, self.head_dim)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)  # each [rows, kv_heads, Q, D]
        cos, sin = rotary
        q, k = apply_interleaved_rotary(q, cos, sin), apply_interleaved_rotary(k, cos, sin)
        # the cache holds the key/value heads; each serves its group of query heads (grouped-query attention)
        context = cache.attend_self(self.layer, q, k, v, scale=self.scale)  # [rows, heads, Q, D]
        return self.o_proj(context.transpose(1, 2).reshape(rows, q_len, -1))


class GlmTextLayer(nn.Module):
    """GLM-4's block: each sublayer's output is normed again before its residual."""

    def __init__(self, config: GlmOcrTextConfig, layer: int):
        super().__init__()
        eps = config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.self_attn = GlmTextAttention(config, layer)
        self.post_self_attn_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)
        self.mlp = QwenMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.post_mlp_layernorm = RMSNorm(config.hidden_size, eps)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], cache: DecodeCache) -> torch.Tensor:
        x = x + self.post_self_attn_layernorm(self.self_attn(self.input_layernorm(x), rotary, cache))
        return x + self.post_mlp_layernorm(self.mlp(self.post_attention_layernorm(x)))


class GlmTextModel(nn.Module):
    def __init__(self, config: GlmOcrTextConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(GlmTextLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = InterleavedMRope(config)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """Input embeddings `[rows, Q, H]` at M-RoPE positions `[3, rows, Q]` -> hidden `[rows, Q, H]`."""
        rotary = self.rotary(positions)  # once per step, shared by every layer
        for layer in self.layers:
            x = layer(x, rotary, cache)
        return self.norm(x)


class GlmOcrModel(PageDecoderLM):
    """GLM-OCR under transformers' names (`model.visual.*`, `model.language_model.*`, `lm_head`); see
    the module docstring."""

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """The vision tower's activations for the pages that join the decode batch together (the
        generation head's `encode_batch`), each at SIE's bound of resized pixels: the tower's states,
        q/k/v and MLP of every patch (a page's prefill through the decoder is a 196th of that); the
        decode cache is charged apart, while it runs (generation/worker.py)."""
        vision: GlmOcrVisionConfig = config.vision  # config: the family's GlmOcrConfig
        patches = MAX_RESIZED_PIXELS // vision.patch_size ** 2
        per_patch = 8 * vision.hidden_size + 2 * vision.intermediate_size
        return GenerationHead.encode_batch * patches * per_patch * torch.empty((), dtype=dtype).element_size()

    def __init__(self, config: GlmOcrConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.visual = VisionTower(config.vision, backend)
        self.language_model = GlmTextModel(config.text)
        self.lm_head = nn.Linear(config.text.hidden_size, config.text.vocab_size, bias=False)
        text = config.text
        self.weight_spec = WeightSpec(
            anchor="lm_head.weight",
            renames=(("model.visual.", "visual."), ("model.language_model.", "language_model."),
                     ("patch_embed.proj.", "patch_embed.")),  # transformers wraps the Conv3d in a module
            stacked=(("self_attn.k_proj", "self_attn.kv_proj", 0), ("self_attn.v_proj", "self_attn.kv_proj", 1)),
            # the multi-token-prediction layer after the last, which generate does not run
            ignore=(f"model.language_model.layers.{text.num_hidden_layers}.",),
        )
        self.size_decoder(text, config.vision.spatial_merge_size)

    def encode_images(self, patches: torch.Tensor, grids: Grids) -> list[torch.Tensor]:
        """`[N, C * T * p * p]` patches of the pages (each page's (rows, columns) of patches in
        `grids`) -> each page's image features `[rows * columns / merge**2, H]`."""
        features = self.visual(patches, grids)
        return list(features.split([h * w // self.merge ** 2 for h, w in grids]))
