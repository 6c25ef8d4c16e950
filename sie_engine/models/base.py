"""What a family declares: its `Family` entry (the registry's `module:attr` points at one) and the
`Backbone` base whose class-level capabilities the runner, the pool and the heads read.

A capability is a class attribute or method with a default here, overridden by the family that
differs; generic code asks the backbone (or its class, before one is built) a typed question and
never probes for an attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import nn

from ..attention import AttentionBackend, AttentionMetadata
from ..batch import Grids
from ..layers.weights import WeightSpec

if TYPE_CHECKING:
    from ..card import ModelCard
    from ..layers.lora import LoRAAdapter
    from ..tokenizer import VocabularyLookup

# float32 batches on CPU run fastest at about 2,048 tokens: the activations of a batch
# (MiniLM's [T, 1536] MLP intermediate is 12 MiB at T = 2,048) then stay in cache between
# the matmul and the elementwise passes. all-MiniLM-L6-v2 on the 2-core box, 2026-11-29:
# 8,192 tokens ~8,000 tokens/s, 2,048 ~9,350, 1,024 ~8,900; bfloat16 is best at 8,192.
CPU_FLOAT32_BATCH_TOKENS = 2048


@dataclass(frozen=True)
class MaskedLMLayout:
    """Where a checkpoint's masked-LM head sits (the `*ForMaskedLM` head SPLADE reads, heads/sparse.py):
    `dense` -> `activation` -> the LayerNorm `norm` (eps `eps`), then the decoder `[vocab, H]` and its bias.

    dense, norm: module names (`<dense>.weight`, `<norm>.weight` or `.gamma`, ...).
    decoder: the decoder's weight; absent from the checkpoint: tied to the input embeddings.
    bias: the decoder bias, the first of these names present; with `bias_required` False an absent
    one is zeros (ModernBERT's `decoder_bias: false`).
    """

    dense: str
    norm: str
    activation: str
    eps: float
    decoder: str
    bias: tuple[str, ...]
    bias_required: bool = True


class Backbone(nn.Module):
    """A family's model: `forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> hidden [T, H]`
    over a packed batch, its checkpoint loaded through `weight_spec`. The class-level attributes
    below are its declared capabilities."""

    weight_spec: WeightSpec
    # Real tokens per float32 batch on CPU (runner.batch_budget); None: no cap (a family that keeps
    # no activations between layers, e.g. a static embedder).
    cpu_float32_batch_tokens: ClassVar[int | None] = CPU_FLOAT32_BATCH_TOKENS
    # Suffixes of linear layers that stay float32 under int8 quantisation (runner.quantize_linear_int8).
    int8_sensitive: ClassVar[tuple[str, ...]] = ()
    # Tokens per group of the CPU backend's grouped SDPA, for a family whose relative positions add a
    # score term through the backend's `bias` hook (DeBERTa, MPNet); None: no bias term.
    attention_bias_group_tokens: ClassVar[int | None] = None
    # The vision side: `forward_images` runs (image items are accepted); with `patch_grids`, each image
    # arrives as its own patch grid (SigLIP 2 NaFlex) and `forward_images` gets the grids.
    supports_images: ClassVar[bool] = False
    patch_grids: ClassVar[bool] = False
    # Image items carry prompt ids of their own (the input preparation's `image_prompts`: the family's
    # image placeholder once, the item's text beside it) and run through `forward_image_prompts`.
    image_prompts: ClassVar[bool] = False
    # The dense head may call `mean_of_rows` (a table lookup fused with mean pooling) instead of
    # pooling hidden states.
    fuses_mean_pool: ClassVar[bool] = False
    # The linear layers whose LoRA deltas the forward applies (module-name suffixes, e.g.
    # `attention.qkv`): the forward takes `lora=` (a layers.lora.LoRABatch) and adds each
    # sequence's adapter delta to its rows. Empty: the family applies no adapters (refused at load).
    lora_targets: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def attention_backend(cls, device: torch.device, dtype: torch.dtype) -> AttentionBackend | None:
        """The batch plan a family without attention brings (sequence boundaries only); None: the
        device's attention backend (attention.select_backend)."""
        return None

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: Any, dtype: torch.dtype) -> int | None:
        """Bytes one batch needs beyond the weights (the pool's reserve); None: the transformer
        estimate from config.json (pool.activation_reserve)."""
        return None

    def checkpoint_adapters(self, checkpoint: Mapping[str, torch.Tensor], prefix: str) -> dict[str, LoRAAdapter]:
        """LoRA adapters the checkpoint itself holds beside the weights (`checkpoint` streams its
        tensors, the backbone's under `prefix`), by name, on the CPU in the backbone's dtype: what a
        card's `adapters: {name: {checkpoint: ...}}` serve. Empty: the checkpoint keeps none."""
        return {}

    def input_embeddings(self) -> nn.Embedding | None:
        """The token embedding table, for heads tied to it (an MLM decoder); None: not exposed
        (the head reads the tensor from the checkpoint instead)."""
        return None

    @classmethod
    def masked_lm_layout(cls, config: Mapping[str, Any]) -> MaskedLMLayout | None:
        """The family's masked-LM head layout under this config.json (the sparse head's SPLADE
        kinds read it); None: the family has none."""
        return None

    def sequence_classifier(self, ctx: Any) -> nn.Module | None:
        """The family's `*ForSequenceClassification` head (a `heads.classifier.SequenceClassifier`
        built from `ctx`, a `HeadContext`: its own, or one of the layouts heads/classifier.py shares);
        None: the family has none (the score head is refused at load)."""
        return None

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        """The vision side over a batch of images -> `[positions of the batch, H]`. `grids`: each
        image's patch grid (h, w) where `patch_grids`, else None. Only where `supports_images`."""
        raise NotImplementedError(f"{type(self).__name__} has no vision side")

    def forward_image_prompts(self, pixel_values: torch.Tensor, attn: AttentionMetadata, grids: Grids | None,
                              prompts: Sequence[np.ndarray]) -> torch.Tensor:
        """The vision side over a batch of images, each inside its item's prompt ids (one image
        placeholder each) -> `[positions of the batch, H]`. Only where `image_prompts`."""
        raise NotImplementedError(f"{type(self).__name__} takes no image prompts")

    def mean_of_rows(self, input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        """`[B, H]` float32: each sequence's mean row (only where `fuses_mean_pool`)."""
        raise NotImplementedError(f"{type(self).__name__} does not fuse mean pooling")


class TwoTowerBackbone(Backbone):
    """A two-tower image-text model (CLIP, SigLIP): the packed forward is the text tower,
    `forward_images` the vision tower; each tower pools and projects into the shared space."""

    supports_images = True
    config: Any  # the family's typed config, with `projection_dim`

    def text_features(self, hidden: torch.Tensor, input_ids: torch.Tensor, cu_seqlens: torch.Tensor,
                      seq_index: torch.Tensor) -> torch.Tensor:
        """Text hidden `[T, H_text]` -> `[B, projection_dim]`."""
        raise NotImplementedError

    def image_features(self, hidden: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        """Image hidden `[B * P, H_vision]` -> `[B, projection_dim]`."""
        raise NotImplementedError


@dataclass(frozen=True)
class Family:
    """One registered family: how to parse its config.json, the backbone it builds, its input
    preparation and the card of a card-less directory of it."""

    name: str
    config_from_hf: Callable[[Mapping[str, Any]], Any]
    model_class: type[Backbone]
    # Pooling of a card-less directory without sentence-transformers' pooling config
    # (local_card.encoder_card): the pooling the family's embedding models usually use.
    default_pooling: str = "mean"
    # Input preparation other than TextTokenizer's (same constructor and `encode`): static
    # embedders tokenise by model2vec's rules; image-text families read the image processor too.
    # None: the checkpoint's Hugging Face tokenizer.
    tokenizer: Callable[..., VocabularyLookup] | None = None
    # The card of a card-less directory of this family, `fn(name, root, config) -> ModelCard`;
    # None: local_card.encoder_card (a text encoder read from sentence-transformers' files).
    local_card: Callable[[str, Path, Mapping[str, Any]], ModelCard] | None = None
    # The family's own heads for outputs it builds otherwise than the shared builder does:
    # (output, `module:function`) pairs, consulted before sie_engine.models.HEADS.
    heads: tuple[tuple[str, str], ...] = ()

    def head_target(self, output: str) -> str | None:
        """The family's own builder of an output (`module:function`), or None: the shared one."""
        return dict(self.heads).get(output)

    def max_seq_len(self, config: Mapping[str, Any]) -> int | None:
        """The longest sequence the family's positions allow under this config.json (RoBERTa-style
        models lose the positions before their offset); None where positions set no limit."""
        return self.config_from_hf(config).max_seq_len  # every family's typed config declares it
