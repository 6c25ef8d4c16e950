"""The Florence-2 family: a `Florence2ForConditionalGeneration` checkpoint (transformers' layout, or
the original remote-code one, renamed as transformers' conversion script renames it):
the DaViT vision tower and its projector (davit.py) make an image's tokens, which stand in the
encoder's input where the processor put its `<image>` placeholders (first, before `<s>` prompt
`</s>`), and BART (bart.py) encodes them with the prompt's token embeddings and decodes.

`encode_images(pixel_values [B, C, H, W]) -> [B, N, d]` runs the tower once per image;
`encode(image_tokens, prompts) -> [memory_i [S_i, d]]` the BART encoder; the decode loop
(sie_engine/generation) then asks `cross_attention_kv` once per sequence and `decode` once per
step: the model is a `generation.EncoderDecoderLM`. serving.py serves it through extract, family.py
is its registry entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...generation.cache import DecodeCache
from ...layers.weights import WeightSpec
from ..base import Backbone
from .bart import BartConfig, BartDecoder, BartEncoder
from .davit import DaViT, DaViTConfig, Projector

# images the vision tower and the encoder run together as they join the decode batch
ENCODE_BATCH = 2
IMAGE_SIDE = 768  # Florence-2's published processor size (CLIPImageProcessor 768 x 768)


@dataclass(frozen=True)
class Florence2Config:
    vision: DaViTConfig
    text: BartConfig
    image_token_id: int
    # the LM head is the shared token table (the top-level tie_word_embeddings)
    tie_lm_head: bool

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> Florence2Config:
        vision, text = config.get("vision_config"), config.get("text_config")
        if not isinstance(vision, Mapping) or not isinstance(text, Mapping):
            raise ValueError("a Florence-2 checkpoint's config.json nests `vision_config` and `text_config` "
                             "(Florence2Config)")
        if "dim_embed" in vision:  # the original remote-code layout (microsoft/Florence-2-*)
            projection = config.get("projection_dim")
            davit = DaViTConfig.from_original(vision, int(projection) if projection is not None else None)
        else:
            davit = DaViTConfig.from_hf(vision)
        parsed = cls(davit, BartConfig.from_hf(text), int(config.get("image_token_id", 51289)),
                     tie_lm_head=bool(config.get("tie_word_embeddings", True)))
        if parsed.vision.projection_dim != parsed.text.d_model:
            raise ValueError(f"vision_config projection_dim {parsed.vision.projection_dim} != text_config d_model "
                             f"{parsed.text.d_model}: the image tokens are the encoder's input")
        return parsed

    @property
    def max_seq_len(self) -> int:
        """Decoder positions: prompt plus generated tokens."""
        return self.text.max_position_embeddings


class LanguageModel(nn.Module):
    """transformers' `BartModel` under `language_model.`: the shared token table, encoder, decoder."""

    def __init__(self, config: BartConfig):
        super().__init__()
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = BartEncoder(config)
        self.decoder = BartDecoder(config)


# The original remote-code checkpoints' names (microsoft/Florence-2-*), renamed as transformers'
# convert_florence2_original_pytorch_to_hf renames them; `final_logits_bias` (zeros) is dropped as it drops it.
ORIGINAL_WEIGHTS = WeightSpec(
    anchor="vision_tower.convs.0.proj.weight",
    renames=(("language_model.model.", "language_model."), ("language_model.lm_head.", "lm_head."),
             ("conv1.fn.dw.", "conv1."), ("conv2.fn.dw.", "conv2."), ("window_attn.norm.", "norm1."),
             ("window_attn.fn.", "window_attn."), ("channel_attn.norm.", "norm1."),
             ("channel_attn.fn.", "channel_attn."), ("ffn.norm.", "norm2."), ("ffn.fn.net.", "ffn."),
             *((f"convs.{i}.proj.", f"convs.{i}.conv.") for i in range(8)),
             ("image_pos_embed.", "multi_modal_projector.image_position_embed."),
             ("visual_temporal_embed.", "multi_modal_projector.visual_temporal_embed."),
             ("image_proj_norm.", "multi_modal_projector.image_proj_norm."),
             ("image_projection", "multi_modal_projector.image_projection")),
    ignore=("language_model.model.encoder.embed_tokens.weight", "language_model.final_logits_bias"),
)


class Florence2Model(Backbone):
    """DaViT + projector + BART under transformers' names (`model.vision_tower.*`,
    `model.multi_modal_projector.*`, `model.language_model.*` renamed without `model.`; `lm_head`), or
    under the original remote-code checkpoints' names (ORIGINAL_WEIGHTS, chosen by the config)."""

    weight_spec = WeightSpec(
        anchor="model.vision_tower.convs.0.conv.weight",
        renames=(("model.vision_tower.", "vision_tower."), ("model.multi_modal_projector.", "multi_modal_projector."),
                 ("model.language_model.", "language_model.")),
        # Florence-2 embeds the prompt with `shared` (its get_input_embeddings), never the encoder's copy
        ignore=("model.language_model.encoder.embed_tokens.weight",),
    )
    supports_images = True
    # no packed text batches: the decode worker runs it (generation/worker.py), images a few at a time
    cpu_float32_batch_tokens = None

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """The vision tower's activations for ENCODE_BATCH images of Florence-2's published size
        (768 x 768, every checkpoint's processor; the first stage dominates: 192 x 192 patches),
        about a dozen tensors of each stage's states held at once; the decoder's cache is charged
        apart, while it runs."""
        vision = config.vision
        size = torch.empty((), dtype=dtype).element_size()
        height = width = IMAGE_SIDE
        per_image = 0
        for k, s, p, dim in zip(vision.patch_size, vision.patch_stride, vision.patch_padding, vision.embed_dim,
                                strict=True):
            height, width = (height + 2 * p - k) // s + 1, (width + 2 * p - k) // s + 1
            per_image += height * width * dim
        return ENCODE_BATCH * per_image * 12 * size

    def __init__(self, config: Florence2Config, backend: AttentionBackend | None = None):
        super().__init__()
        self.config = config
        if config.vision.original_layout:
            self.weight_spec = ORIGINAL_WEIGHTS
        text = config.text
        self.vision_tower = DaViT(config.vision)
        self.multi_modal_projector = Projector(config.vision)
        self.language_model = LanguageModel(text)
        self.lm_head = None if config.tie_lm_head else nn.Linear(text.d_model, text.vocab_size, bias=False)
        self.embed_scale = text.embed_scale
        self.decoder_layers = text.decoder_layers
        self.decoder_heads = text.decoder_heads
        self.decoder_head_dim = text.d_model // text.decoder_heads
        self.decoder_positions = text.max_position_embeddings

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError("Florence-2 generates from images: it has no packed text forward")

    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """`[B, C, H, W]` (the processor's size) -> image tokens `[B, N, d_model]`."""
        return self.multi_modal_projector(self.vision_tower(pixel_values))

    def encode(self, image_tokens: torch.Tensor, prompts: list[list[int]]) -> list[torch.Tensor]:
        """Image tokens `[B, N, d]` and each image's prompt ids (`<s>` prompt `</s>`, no placeholders) ->
        the encoder's states per sequence `[N + len(prompt_i), d]`."""
        b, n, d = image_tokens.shape
        lengths = [n + len(p) for p in prompts]
        longest = max(len(p) for p in prompts)
        ids = torch.zeros((b, longest), dtype=torch.long)  # padding rows are masked keys, never read
        for i, p in enumerate(prompts):
            ids[i, :len(p)] = torch.tensor(p, dtype=torch.long)
        text = self.language_model.shared(ids.to(image_tokens.device)) * self.embed_scale
        states = self.language_model.encoder(torch.cat([image_tokens, text.to(image_tokens.dtype)], dim=1), lengths)
        return [states[i, :length] for i, length in enumerate(lengths)]

    def cross_attention_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.language_model.decoder.cross_attention_kv(memory)

    def decode(self, tokens: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        table = self.language_model.decoder.embed_tokens or self.language_model.shared
        hidden = self.language_model.decoder(table(tokens) * self.embed_scale, cache.step_positions, cache)
        weight = self.language_model.shared.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(hidden, weight).float()
