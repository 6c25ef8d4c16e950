"""PaddleOCR-VL (PaddlePaddle/PaddleOCR-VL: transformers' `PaddleOCRVLForConditionalGeneration`): the
vision encoder and projector (vision.py) over each page at its own resolution, the page's image
features where the processor put its `<|IMAGE_PLACEHOLDER|>` tokens, and the ERNIE-4.5 decoder,
which generates the page's text.

Read top to bottom: the config, the decoder's layers, the model.

- The decoder (transformers' PaddleOCRTextModel, ERNIE-4.5's blocks): RMSNorm, attention (q / k / v
  / o with `use_bias`, grouped-query), the residual; RMSNorm, the SwiGLU MLP, the residual. The LM
  head is the token table where `tie_word_embeddings` (the published checkpoint's default).
- Rotary positions are M-RoPE in Qwen2-VL's layout (rotate half; the i-th block of
  `mrope_section` frequencies rotates by the temporal, height or width position, i % 3), over the
  whole head. Positions are transformers' `get_rope_index`, the same as GLM-OCR's
  (models/glm_ocr/model.py `rope_index`): the prompt's tokens before the page count 0, 1, ..., the
  page's features sit at (start, start + row, start + column) of its merge grid, the tokens after
  count on from start + max(rows, columns); every generated token takes its place in the sequence
  plus the page's `rope_delta`, on all three axes.
- Checkpoints carry SigLIP's unused pooling head (`vision_model.head`) and a
  `packing_position_embedding`, which transformers ignores on load: SIE ignores them too.

The decoder runs through the decode cache (sie_engine/generation/cache.py): `hidden` takes a
step's input embeddings `[rows, Q, H]` and M-RoPE positions `[3, rows, Q]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, default_scale
from ...batch import Grids
from ...generation.cache import DecodeCache
from ...generation.head import GenerationHead
from ...images import MAX_RESIZED_PIXELS
from ...layers.blocks import RMSNorm
from ...layers.rotary import RotaryEmbedding, apply_rotary, multimodal_rotary
from ...layers.weights import WeightSpec
from ..glm_ocr.model import MRopeDecoderConfig
from ..glm_ocr.vision import SwiGLU
from ..page_decoder import PageDecoderLM
from .vision import PaddleOcrVisionConfig, Projector, VisionTower


@dataclass(frozen=True)
class PaddleOcrTextConfig(MRopeDecoderConfig):
    use_bias: bool  # on q / k / v / o and the MLP

    @staticmethod
    def from_hf(text: Mapping[str, Any]) -> PaddleOcrTextConfig:
        # no default mrope_section: PaddleOCR-VL's attention reads the config's
        return PaddleOcrTextConfig(**MRopeDecoderConfig.fields(text, None), use_bias=bool(text.get("use_bias")))


@dataclass(frozen=True)
class PaddleOcrVlConfig:
    """config.json of a PaddleOCR-VL checkpoint, completed by transformers' PaddleOCRVLConfig (a
    published config.json lists only what differs from its defaults, its text keys at the top)."""

    vision: PaddleOcrVisionConfig
    text: PaddleOcrTextConfig
    image_token_id: int
    tie_lm_head: bool

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> PaddleOcrVlConfig:
        from transformers import PaddleOCRVLConfig as Reference

        if config.get("model_type") != "paddleocr_vl":
            raise ValueError(f"model_type={config.get('model_type')!r} is not a PaddleOCR-VL (paddleocr_vl) checkpoint")
        full = Reference.from_dict(dict(config))
        return PaddleOcrVlConfig(vision=PaddleOcrVisionConfig.from_hf(full.vision_config.to_dict()),
                                 text=PaddleOcrTextConfig.from_hf(full.text_config.to_dict()),
                                 image_token_id=int(full.image_token_id),
                                 tie_lm_head=bool(full.tie_word_embeddings))

    @property
    def max_seq_len(self) -> int:
        """Decoder positions: the prompt (image features included) plus generated tokens."""
        return self.text.max_position_embeddings


class ErnieAttention(nn.Module):
    def __init__(self, config: PaddleOcrTextConfig, layer: int):
        super().__init__()
        self.layer, self.sections = layer, config.mrope_section
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads, config.num_key_value_heads,
                                                    config.head_dim)
        bias = config.use_bias
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=bias)
        self.kv_proj = nn.Linear(config.hidden_size, 2 * self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=bias)
        self.scale = default_scale(self.head_dim)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], cache: DecodeCache) -> torch.Tensor:
        rows, q_len, _ = x.shape
        cos, sin = rotary  # [rows * Q, D]
        q = apply_rotary(self.q_proj(x).view(rows * q_len, self.heads, self.head_dim), cos, sin)
        k, v = self.kv_proj(x).view(rows * q_len, 2, self.kv_heads, self.head_dim).unbind(1)
        k = apply_rotary(k, cos, sin)

        def heads_first(t: torch.Tensor) -> torch.Tensor:  # [rows * Q, h, D] -> [rows, h, Q, D]
            return t.view(rows, q_len, -1, self.head_dim).transpose(1, 2)

        # the cache holds the key/value heads; each serves its group of query heads (grouped-query attention)
        context = cache.attend_self(self.layer, heads_first(q), heads_first(k), heads_first(v), scale=self.scale)
        return self.o_proj(context.transpose(1, 2).reshape(rows, q_len, -1))


class ErnieLayer(nn.Module):
    def __init__(self, config: PaddleOcrTextConfig, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = ErnieAttention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size, config.hidden_act, bias=config.use_bias)

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], cache: DecodeCache) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rotary, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class ErnieTextModel(nn.Module):
    def __init__(self, config: PaddleOcrTextConfig):
        super().__init__()
        self.sections = config.mrope_section
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(ErnieLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """Input embeddings `[rows, Q, H]` at M-RoPE positions `[3, rows, Q]` -> hidden `[rows, Q, H]`."""
        rotary = multimodal_rotary(self.rotary, positions.reshape(3, -1), self.sections)  # once per step
        for layer in self.layers:
            x = layer(x, rotary, cache)
        return self.norm(x)


class PaddleOcrVlModel(PageDecoderLM):
    """PaddleOCR-VL under its checkpoint's names (see `weight_spec`); see the module docstring."""

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """The vision encoder's activations for the pages that join the decode batch together (the
        generation head's `encode_batch`), each at SIE's bound of resized pixels: the encoder's
        states, q/k/v and MLP of every patch; the decode cache is charged apart, while it runs."""
        vision: PaddleOcrVisionConfig = config.vision  # config: the family's PaddleOcrVlConfig
        patches = MAX_RESIZED_PIXELS // vision.patch_size ** 2
        per_patch = 6 * vision.hidden_size + vision.intermediate_size
        return GenerationHead.encode_batch * patches * per_patch * torch.empty((), dtype=dtype).element_size()

    def __init__(self, config: PaddleOcrVlConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.visual = VisionTower(config.vision, backend)
        self.projector = Projector(config.vision, config.text.hidden_size)
        self.language_model = ErnieTextModel(config.text)
        text = config.text
        self.lm_head = None if config.tie_lm_head else nn.Linear(text.hidden_size, text.vocab_size, bias=False)
        # the checkpoint's own names (PaddlePaddle/PaddleOCR-VL's, which transformers' save_pretrained writes
        # back: its conversion_mapping renames them on load): `visual.vision_model.*`, `mlp_AR.*` (the
        # projector), `model.*` (the decoder), `lm_head` unless tied
        self.weight_spec = WeightSpec(
            anchor="mlp_AR.linear_2.weight",
            renames=(
                # the vision blocks' `self_attn` as `attn`: the decoder's k / v (same names) are the ones stacked
                *((f"visual.vision_model.encoder.layers.{i}.self_attn.", f"visual.layers.{i}.attn.")
                  for i in range(config.vision.num_hidden_layers)),
                ("visual.vision_model.encoder.layers.", "visual.layers."), ("visual.vision_model.", "visual."),
                ("mlp_AR.", "projector."), ("model.", "language_model.")),
            stacked=(("self_attn.k_proj", "self_attn.kv_proj", 0), ("self_attn.v_proj", "self_attn.kv_proj", 1)),
            # SigLIP's pooling head and the packing positions, which transformers ignores on load too
            ignore=("visual.vision_model.head.", "visual.vision_model.embeddings.packing_position_embedding",
                    *(("lm_head.weight",) if config.tie_lm_head else ())),
        )
        self.size_decoder(text, config.vision.spatial_merge_size)

    def encode_images(self, patches: torch.Tensor, grids: Grids) -> list[torch.Tensor]:
        """`[N, C * p * p]` patches of the pages (each page's (rows, columns) of patches in `grids`)
        -> each page's image features `[rows * columns / merge**2, H]`."""
        features = self.projector(self.visual(patches, grids), grids)
        return list(features.split([h * w // self.merge ** 2 for h, w in grids]))
