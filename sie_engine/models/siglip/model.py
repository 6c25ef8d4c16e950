"""SigLIP (google/siglip-*, and SigLIP 2's fixed-resolution checkpoints, which keep SigLIP's
architecture and config): CLIP's pre-norm layers (clip.py) with SigLIP's own ends.

Text: bidirectional attention over the whole sequence, which SigLIP's processor pads to 64
tokens (the model was trained so: `padding="max_length"`; SiglipInputs below pads likewise),
the final layer norm, the state of the sequence's last position, and a linear head with bias.
Images: a patch convolution with bias, learned positions, no class token and no pre-norm; the
post-norm over every patch, then the multi-head attention pooling head (a learned probe
attends to the patches; layer norm and MLP with a residual).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...batch import Grids
from ...layers.weights import WeightSpec
from ...tokenizer import ImageTextInputs, Tokenized
from ..base import Family, TwoTowerBackbone
from ..clip.card import image_text_card
from ..clip.model import MLP, Encoder, ImageTextConfig, PatchEmbeddings, TextTower, complete_towers


def shared_width(text: Mapping[str, Any], vision: Mapping[str, Any]) -> int:
    """The shared embedding width: the text head's `projection_size` (default: the text width),
    which the vision tower's width must equal."""
    width = text.get("projection_size") or text["hidden_size"]
    if width != vision["hidden_size"]:
        raise ValueError(f"text projection_size {width} != vision hidden_size {vision['hidden_size']}: "
                         "the towers' embeddings would not share a space")
    return int(width)


def siglip_config(config: Mapping[str, Any]) -> ImageTextConfig:
    """SigLIP's config.json (the shared width: `shared_width`)."""
    text, vision, _ = complete_towers(config, "siglip")
    return ImageTextConfig.parse(text, vision, shared_width(text, vision),
                                 vision_use_head=bool(vision.get("vision_use_head", True)))


class AttentionPoolingHead(nn.Module):
    """A learned probe attends to each image's patches (`torch.nn.MultiheadAttention`'s
    weights: `in_proj_weight` `[3H, H]`, `out_proj`), then x + mlp(layernorm(x))."""

    def __init__(self, config: ImageTextConfig):
        super().__init__()
        hidden = config.vision.hidden_size
        self.num_heads = config.vision.num_attention_heads
        self.probe = nn.Parameter(torch.empty(1, 1, hidden))
        self.attention = nn.Module()
        self.attention.in_proj_weight = nn.Parameter(torch.empty(3 * hidden, hidden))
        self.attention.in_proj_bias = nn.Parameter(torch.empty(3 * hidden))
        self.attention.out_proj = nn.Linear(hidden, hidden)
        self.layernorm = nn.LayerNorm(hidden, eps=config.vision.layer_norm_eps)
        self.mlp = MLP(hidden, config.vision.intermediate_size, config.vision.hidden_act)

    def forward(self, hidden: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        """`[sum(lengths), H]`, each image's positions in turn -> `[B, H]`."""
        H = hidden.shape[-1]
        d = H // self.num_heads
        images = len(lengths)
        w_q, w_kv = self.attention.in_proj_weight.split((H, 2 * H))
        b_q, b_kv = self.attention.in_proj_bias.split((H, 2 * H))
        q = F.linear(self.probe[0], w_q, b_q).view(1, self.num_heads, 1, d).expand(images, -1, -1, -1)
        kv = F.linear(hidden, w_kv, b_kv)  # [T, 2H]
        mask = None
        if len(set(lengths)) > 1:  # images of their own sizes (NaFlex): padded to the longest, padding masked
            longest = max(lengths)
            kv = nn.utils.rnn.pad_sequence(kv.split(list(lengths)), batch_first=True)
            mask = torch.arange(longest, device=hidden.device) < torch.tensor(lengths, device=hidden.device)[:, None]
            mask = mask[:, None, None, :]  # [B, 1, 1, longest]: broadcast over heads and the probe
        k, v = kv.reshape(images, -1, 2, self.num_heads, d).permute(2, 0, 3, 1, 4)
        pooled = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).reshape(images, H)  # [B, heads, 1, d]
        pooled = self.attention.out_proj(pooled)
        return pooled + self.mlp(self.layernorm(pooled))


class SiglipModel(TwoTowerBackbone):
    """Packed SigLIP: the same two forward passes and feature methods as clip.ClipModel."""

    weight_spec = WeightSpec(
        anchor="text_model.embeddings.token_embedding.weight",
        stacked=(("self_attn.q_proj", "self_attn.qkv", 0), ("self_attn.k_proj", "self_attn.qkv", 1),
                 ("self_attn.v_proj", "self_attn.qkv", 2)),
        ignore=("logit_scale", "logit_bias", "text_model.embeddings.position_ids",
                "vision_model.embeddings.position_ids"),
    )

    def __init__(self, config: ImageTextConfig, backend: AttentionBackend):
        super().__init__()
        if not config.vision_use_head:
            raise ValueError("vision_use_head: false (no pooling head) gives no image embedding")
        self.config = config
        self.text_model = TextTower(config, backend, causal=False)
        self.text_model.head = nn.Linear(config.text.hidden_size, config.projection_dim)
        self.vision_model = nn.Module()
        self.vision_model.embeddings = PatchEmbeddings(config, class_token=False, conv_bias=True)
        self.vision_model.encoder = Encoder(config.vision, backend, causal=False)
        self.vision_model.post_layernorm = nn.LayerNorm(config.vision.hidden_size, eps=config.vision.layer_norm_eps)
        self.vision_model.head = AttentionPoolingHead(config)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.text_model(input_ids, positions, attn)

    def text_features(self, hidden: torch.Tensor, input_ids: torch.Tensor, cu_seqlens: torch.Tensor,
                      seq_index: torch.Tensor) -> torch.Tensor:
        """Each sequence's last position (a pad token for short texts, as in training), projected."""
        return self.text_model.head(hidden.index_select(0, cu_seqlens[1:].long() - 1))

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        vision = self.vision_model
        return vision.post_layernorm(vision.encoder(vision.embeddings(pixel_values), attn))

    def image_features(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        return self.vision_model.head(hidden, (cu_seqlens[1:] - cu_seqlens[:-1]).tolist())


class SiglipInputs(ImageTextInputs):
    """SigLIP's input preparation: texts padded with the pad token to the window (64 tokens, as
    SigLIP was trained and its processor is used); an image is P positions (no class token).

    SigLIP (1) checkpoints ship only a SentencePiece model, whose transformers tokenizer
    (SiglipTokenizer: lower-cases and drops punctuation first) has no Rust twin: those texts are
    tokenised by it, in Python, on the tokenizer threads. SigLIP 2's (Gemma's) is a Rust one."""

    class_tokens = 0
    read_config = staticmethod(siglip_config)

    def load_text(self, layout, max_length: int, trust_remote_code: bool) -> None:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(layout.tokenizer_source), use_fast=True,
                                           trust_remote_code=trust_remote_code)
        if hf.is_fast:
            return super().load_text(layout, max_length, trust_remote_code)
        self.hf, self.max_length, self._tok = hf, max_length, None
        self.pad_token_id, self.cls_token_id, self.sep_token_id = hf.pad_token_id, hf.cls_token_id, hf.sep_token_id
        self.special_ids = frozenset(hf.all_special_ids)
        self.uses_type_ids = False

    def encode(self, texts, *, add_special_tokens: bool = True, with_offsets: bool = False) -> Tokenized:
        if self._tok is not None:
            tokenized = super().encode(texts, add_special_tokens=add_special_tokens, with_offsets=with_offsets)
        else:
            tokenized = self._encode_in_python(list(texts), add_special_tokens)
        pad = self.pad_token_id if self.pad_token_id is not None else 0
        tokenized.ids = [np.pad(ids, (0, max(0, self.max_length - len(ids))), constant_values=pad)
                         for ids in tokenized.ids]
        return tokenized

    def _encode_in_python(self, texts: list[str], add_special_tokens: bool) -> Tokenized:
        """The slow tokenizer's ids; a text over the window again with its truncation (which keeps `</s>`)."""
        ids = self.hf(texts, add_special_tokens=add_special_tokens)["input_ids"]
        truncated = [len(x) > self.max_length for x in ids]
        long = [i for i, cut in enumerate(truncated) if cut]
        if long:
            shortened = self.hf([texts[i] for i in long], add_special_tokens=add_special_tokens, truncation=True,
                                max_length=self.max_length)["input_ids"]
            for i, row in zip(long, shortened):
                ids[i] = row
        return Tokenized(ids=[np.asarray(x, dtype=np.int32) for x in ids], type_ids=None, truncated=truncated)


FAMILY = Family("siglip", siglip_config, SiglipModel, "last", tokenizer=SiglipInputs, local_card=image_text_card)
