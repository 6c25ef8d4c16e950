"""The Donut family: a `VisionEncoderDecoderModel` checkpoint with a DonutSwin encoder (swin.py) and
an MBart decoder (mbart.py); between them transformers' `enc_to_dec_proj` where the widths differ.

`encode_images(pixel_values [B, C, H, W]) -> [B, S, d_model]` runs the encoder once per page;
the decode loop (sie_engine/generation) then asks `cross_attention_kv` once per sequence and
`decode` once per step: the model is a `generation.EncoderDecoderLM`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...generation.cache import DecodeCache
from ...layers.weights import WeightSpec
from ..base import Backbone
from .mbart import MBartDecoder, MBartDecoderConfig
from .swin import SwinConfig, SwinEncoder

# Pages the encoder runs together when they join the decode batch (generation/worker.py).
ENCODE_BATCH = 2


@dataclass(frozen=True)
class DonutConfig:
    encoder: SwinConfig
    decoder: MBartDecoderConfig
    # transformers adds `enc_to_dec_proj` when the widths differ and the decoder names no cross width
    project_memory: bool

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> DonutConfig:
        enc, dec = config.get("encoder"), config.get("decoder")
        if not isinstance(enc, Mapping) or not isinstance(dec, Mapping):
            raise ValueError("a Donut checkpoint's config.json nests `encoder` and `decoder` configs "
                             "(VisionEncoderDecoderConfig)")
        if enc.get("model_type") not in ("donut-swin", "donut"):
            raise ValueError(f"encoder model_type {enc.get('model_type')!r}: the Donut family runs a DonutSwin encoder")
        encoder, decoder = SwinConfig.from_hf(enc), MBartDecoderConfig.from_hf(dec)
        cross = dec.get("cross_attention_hidden_size")
        if cross is not None and cross != encoder.hidden_size:
            raise ValueError(f"decoder cross_attention_hidden_size {cross} != encoder hidden size "
                             f"{encoder.hidden_size}")
        return cls(encoder, decoder, project_memory=encoder.hidden_size != decoder.d_model and cross is None)

    @property
    def max_seq_len(self) -> int:
        """Decoder positions: prompt plus generated tokens."""
        return self.decoder.max_position_embeddings


class DonutModel(Backbone):
    """Swin encoder + MBart decoder under transformers' names (`encoder.*`, `decoder.model.decoder.*`
    renamed to `decoder.*`, `decoder.lm_head` to `decoder.lm_head`)."""

    weight_spec = WeightSpec(
        anchor="encoder.embeddings.patch_embeddings.projection.weight",
        renames=(("decoder.model.decoder.", "decoder."),),
    )
    supports_images = True
    # no packed text batches: the decode worker runs it (generation/worker.py), pages a few at a time
    cpu_float32_batch_tokens = None

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """The encoder's activations for ENCODE_BATCH pages (Donut's first stage dominates: a
        2560 x 1920 page is 307,200 patches of 128 wide), about a dozen tensors of each stage's
        states held at once; the decoder's cache is charged apart, while it runs."""
        swin = config.encoder
        size = torch.empty((), dtype=dtype).element_size()
        per_page = sum(h * w * swin.embed_dim * 2 ** i for i, (h, w) in enumerate(swin.stage_resolutions()))
        return ENCODE_BATCH * per_page * 12 * size

    def __init__(self, config: DonutConfig, backend: AttentionBackend | None = None):
        super().__init__()
        self.config = config
        self.encoder = SwinEncoder(config.encoder)
        self.decoder = MBartDecoder(config.decoder)
        self.enc_to_dec_proj = (nn.Linear(config.encoder.hidden_size, config.decoder.d_model)
                                if config.project_memory else None)
        self.decoder_layers = config.decoder.layers
        self.decoder_heads = config.decoder.heads
        self.decoder_head_dim = config.decoder.head_dim
        self.decoder_positions = config.decoder.max_position_embeddings

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError("Donut generates from images: it has no packed text forward")

    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """`[B, C, H, W]` (the processor's size) -> encoder states `[B, S, d_model]`."""
        memory = self.encoder(pixel_values)
        return self.enc_to_dec_proj(memory) if self.enc_to_dec_proj is not None else memory

    def cross_attention_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.decoder.cross_attention_kv(memory)

    def decode(self, tokens: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        return self.decoder.decode(tokens, cache.step_positions, cache)
