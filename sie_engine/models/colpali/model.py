"""PaliGemma as ColPali runs it (vidore/colpali-v1.3-hf: `ColPaliForRetrieval`, whose `vlm` is a
`PaliGemmaModel`): a SigLIP vision tower without its pooling head, a linear projector into the
Gemma (1) decoder's width, and the decoder over [image tokens, then the prompt's tokens].

Read top to bottom: the config, the vision tower's attention, the Gemma layer and decoder, the model,
the input preparation.

- Gemma (1) layers are models/qwen/model.py's LLaMA blocks (grouped-query attention with one K/V head,
  scores scaled by head_dim ** -0.5, the GeGLU gated MLP) with Gemma's RMSNorm (`1 + weight`,
  models/gemma3/model.py's); token embeddings are scaled by sqrt(hidden_size), image features are not
  (transformers scales inside the embedding lookup and merges the image features after it).
- Attention is bidirectional over each whole sequence: ColPali's processor returns
  `token_type_ids` of 0 for every token, which `PaliGemmaModel` makes one bidirectional block
  (as PaliGemma attends over its prefix); `model(**processor(...))` runs so.
- A page image is a fixed-length sequence: the vision tower's P patches, projected, then
  `<bos>` + the visual prompt ("Describe the image.") + "\n"; a query is
  `<bos>` + query prefix ("Question: ") + text + 10 `<pad>` (query augmentation) + "\n".
  Every position yields a vector (ColPali keeps all but batch padding, which packing has none of).

`forward(input_ids, positions, attn)` runs a query's tokens; `forward_images(pixel_values, attn)`
runs pages (attn over the P + prompt positions of each page) and returns `[B * (P + L), H]`.
Positions start at 1 in transformers; rotary attention depends only on their differences, so
SIE's packed positions from 0 give the same scores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...batch import Grids
from ...layers.rotary import RotaryEmbedding
from ...layers.weights import WeightSpec
from ...tokenizer import ImageTextInputs, Tokenized
from ..base import Backbone, Family
from ..clip.model import Encoder, PatchEmbeddings, SelfAttention, TowerConfig
from ..gemma3.model import Gemma3RMSNorm
from ..qwen.model import FUSED_KV_AND_GATE_UP, QwenConfig, QwenDecoderLayer
from .card import colpali_card
from .vlm_config import RetrieverConfig, complete_config, decoder_config

QUERY_AUGMENTATION_TOKENS = 10  # ColPaliProcessor's suffix: the pad token ten times


@dataclass(frozen=True)
class PaliGemmaConfig(RetrieverConfig):
    """config.json of a ColPali checkpoint (`vlm_config` with its `vision_config` and `text_config`).

    vision: the SigLIP tower; image_size, patch_size, num_channels: its input.
    text: the Gemma decoder as models/qwen/model.py's config (bidirectional, no biases).
    image_token_id: the placeholder the processor writes once per image feature.
    embedding_dim: the width of ColPali's token vectors (128).
    """

    vision: TowerConfig
    image_size: int
    patch_size: int
    num_channels: int
    text: QwenConfig
    image_token_id: int
    embedding_dim: int

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> PaliGemmaConfig:
        """Every key completed by transformers' config classes (a published config.json lists only
        what differs from their defaults)."""
        full, text, vision = complete_config(config, "colpali", "paligemma",
                                             "only PaliGemma-based ColPali is supported")
        if text.get("model_type") != "gemma":
            raise ValueError(f"text_config.model_type={text.get('model_type')!r}: only a Gemma (1) decoder is "
                             "supported (PaliGemma 2's Gemma 2 is not)")
        bias = bool(text.get("attention_bias", False))
        decoder = decoder_config(text, hidden_act="gelu_pytorch_tanh", max_positions=8192, rope_theta=10_000.0,
                                 qkv_bias=bias, o_bias=bias, causal=False)
        projection = vision.get("projection_dim") or full.vlm_config.projection_dim
        if projection != decoder.hidden_size:
            raise ValueError(f"vision projection_dim {projection} != text hidden_size {decoder.hidden_size}")
        return PaliGemmaConfig(
            vision=TowerConfig.from_hf(vision), image_size=vision["image_size"], patch_size=vision["patch_size"],
            num_channels=vision["num_channels"], text=decoder, image_token_id=int(full.vlm_config.image_token_id),
            embedding_dim=int(full.embedding_dim),
        )


class SplitQueryAttention(SelfAttention):
    """SigLIP's attention with the decoder's weight layout (q_proj apart, k_proj and v_proj fused as
    kv_proj), so one stacking rule loads both towers: CLIP's fused qkv would also claim the decoder's
    q_proj, whose grouped-query shard is wider than its k and v."""

    def __init__(self, hidden_size: int, num_heads: int, backend: AttentionBackend, causal: bool):
        super().__init__(hidden_size, num_heads, backend, causal)
        del self.qkv
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.kv_proj = nn.Linear(hidden_size, 2 * hidden_size)

    def forward(self, x: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        T, H = x.shape
        q = self.q_proj(x).view(T, self.num_heads, self.head_dim)
        k, v = self.kv_proj(x).view(T, 2, self.num_heads, self.head_dim).unbind(1)
        return self.backend(q, k, v, attn, scale=self.scale, causal=self.causal).reshape(T, H)


class GemmaDecoderLayer(QwenDecoderLayer):
    """A LLaMA block whose two norms are Gemma's (`1 + weight`, in float32)."""

    def __init__(self, config: QwenConfig, backend: AttentionBackend):
        super().__init__(config, backend)
        self.input_layernorm = Gemma3RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = Gemma3RMSNorm(config.hidden_size, config.rms_norm_eps)


class GemmaDecoder(nn.Module):
    def __init__(self, config: QwenConfig, backend: AttentionBackend):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_scale = config.hidden_size ** 0.5
        self.layers = nn.ModuleList(GemmaDecoderLayer(config, backend) for _ in range(config.num_hidden_layers))
        self.norm = Gemma3RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.rope_theta)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        # the scale rounded to the weights' dtype first, as transformers multiplies
        return x * torch.tensor(self.embed_scale, dtype=x.dtype).item()

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        rotary = self.rotary(positions)
        for layer in self.layers:
            x = layer(x, rotary, attn)
        return self.norm(x)


class PaliGemmaModel(Backbone):
    """Packed PaliGemma (ColPali's `vlm`); see the module docstring. `image_prompt_ids`: the tokens
    after each page's image features, set from the checkpoint's processor when the family's
    multivector head is built (models/colpali/head.py)."""

    supports_images = True

    weight_spec = WeightSpec(
        anchor="multi_modal_projector.linear.weight",
        # checkpoints converted under transformers 4 nest the towers one level deeper
        renames=(("language_model.model.", "language_model."), ("vision_tower.vision_model.", "vision_tower.")),
        # both towers keep q_proj apart and fuse k_proj and v_proj (equal shards in both)
        stacked=FUSED_KV_AND_GATE_UP,
        ignore=("language_model.lm_head", "vision_tower.embeddings.position_ids",
                "vision_tower.vision_model.embeddings.position_ids"),
    )

    def __init__(self, config: PaliGemmaConfig, backend: AttentionBackend):
        super().__init__()
        self.config = config
        self.backend = backend
        self.vision_tower = nn.Module()
        self.vision_tower.embeddings = PatchEmbeddings(config, class_token=False, conv_bias=True)
        self.vision_tower.encoder = Encoder(config.vision, backend, causal=False)
        for layer in self.vision_tower.encoder.layers:
            layer.self_attn = SplitQueryAttention(config.vision.hidden_size, config.vision.num_attention_heads,
                                                  backend, causal=False)
        self.vision_tower.post_layernorm = nn.LayerNorm(config.vision.hidden_size, eps=config.vision.layer_norm_eps)
        self.multi_modal_projector = nn.Module()
        self.multi_modal_projector.linear = nn.Linear(config.vision.hidden_size, config.text.hidden_size)
        self.language_model = GemmaDecoder(config.text, backend)
        self.image_prompt_ids: torch.Tensor | None = None

    def set_image_prompt(self, token_ids: Sequence[int]) -> None:
        """The `[L]` tokens that follow each page's image features (ColPaliInputs.image_prompt_ids)."""
        self.image_prompt_ids = torch.as_tensor(token_ids, dtype=torch.long)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return self.language_model(self.language_model.embed(input_ids), positions, attn)

    def forward_images(self, pixel_values: torch.Tensor, attn: AttentionMetadata,
                       grids: Grids | None = None) -> torch.Tensor:
        """`[B, C, S, S]` -> `[B * (P + L), H]`: each page's image features, then its prompt."""
        if self.image_prompt_ids is None:
            raise RuntimeError("the image prompt was not set (ColPali's multivector head sets it at load: "
                               "models/colpali/head.py)")
        B, P = pixel_values.shape[0], self.config.num_patches
        vision = self.vision_tower
        patches = vision.embeddings(pixel_values)  # [B * P, H_vision]
        patches = vision.post_layernorm(vision.encoder(patches, self.backend.prepare((P,) * B, patches.device)))
        features = self.multi_modal_projector.linear(patches).view(B, P, -1)
        prompt_ids = self.image_prompt_ids.to(pixel_values.device)
        prompt = self.language_model.embed(prompt_ids)  # [L, H], the same for every page
        x = torch.cat([features, prompt.expand(B, -1, -1)], dim=1)  # [B, P + L, H]
        length = x.shape[1]
        positions = torch.arange(length, device=x.device).repeat(B)
        return self.language_model(x.reshape(B * length, -1), positions, attn)


def read_colpali_prompts(root: Path) -> dict[str, str]:
    """The processor's prompts (`processor_config.json`; ColPaliProcessor's defaults where absent)."""
    path = Path(root) / "processor_config.json"
    settings = json.loads(path.read_text()) if path.is_file() else {}
    return {"visual_prompt_prefix": settings.get("visual_prompt_prefix", "Describe the image."),
            "query_prefix": settings.get("query_prefix", "Question: ")}


class ColPaliInputs(ImageTextInputs):
    """ColPali's input preparation, as ColPaliProcessor: a text item is a query
    (`<bos>` + prefix + text + 10 `<pad>` + "\\n", no special tokens added), a page image is its
    pixels plus the fixed prompt `<bos>` + "Describe the image." + "\\n" after its P features."""

    class_tokens = 0
    read_config = staticmethod(PaliGemmaConfig.from_hf)

    def __init__(self, layout, max_length: int, trust_remote_code: bool = False):
        super().__init__(layout, max_length, trust_remote_code)
        prompts = read_colpali_prompts(self.layout_root)
        hf = self.hf
        self.query_prefix = prompts["query_prefix"]
        self.query_suffix = hf.pad_token * QUERY_AUGMENTATION_TOKENS + "\n"
        self.image_prompt_ids = self.plain_ids(f"{hf.bos_token}{prompts['visual_prompt_prefix']}\n")
        self.images.image_tokens += len(self.image_prompt_ids)  # the prompt runs after each image's features

    def load_text(self, layout, max_length: int, trust_remote_code: bool) -> None:
        self.layout_root = layout.root
        super().load_text(layout, max_length, trust_remote_code)

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = True, with_offsets: bool = False) -> Tokenized:
        """Queries as ColPaliProcessor.process_queries writes them (its bos in the text, none added)."""
        bos = self.hf.bos_token
        queries = [f"{bos}{self.query_prefix}{text}{self.query_suffix}" for text in texts]
        return super().encode(queries, add_special_tokens=False, with_offsets=with_offsets)


FAMILY = Family("colpali", PaliGemmaConfig.from_hf, PaliGemmaModel, "none", tokenizer=ColPaliInputs,
                local_card=colpali_card,
                heads=(("multivector", "sie_engine.models.colpali.head:build_colpali_multivector"),))
