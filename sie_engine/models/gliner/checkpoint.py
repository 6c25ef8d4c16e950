"""The GLiNER checkpoint layout and its typed config.

A GLiNER directory is not a plain Hugging Face model: it holds
`gliner_config.json` (the span head's settings, and in newer saves the backbone's
config under `encoder_config`), `pytorch_model.bin` or `model.safetensors` with
the backbone under `token_rep_layer.bert_layer.model.*` next to the head's
tensors, and usually the tokenizer with GLiNER's prompt tokens already added.
Older saves (urchade/gliner_*-v2.1) carry neither the backbone config nor the
tokenizer: both come from the backbone's own repository (`model_name`), and
GLiNER adds `[FLERT]`, `<<ENT>>`, `<<SEP>>` to that tokenizer and resizes the
embeddings to match. This module answers those questions for SIE's loader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from ...checkpoints.layout import CheckpointLayout, refuse_settings
from ...weights import _from_hub, weight_files

# A GLiNER checkpoint's config; such a directory has no config.json.
GLINER_CONFIG = "gliner_config.json"
# The prefix of the backbone's tensors inside a GLiNER checkpoint.
BACKBONE_PREFIX = "token_rep_layer.bert_layer.model."
# What SIE needs from a backbone repository named by `model_name`.
BACKBONE_FILES = ("*.json", "*.model", "*.txt", "tokenizer*")
# Tokens GLiNER adds to the backbone's tokenizer, in this order (GLiNER's `_get_special_tokens`).
EXTRA_TOKENS = ("[FLERT]",)

# Where GLiNER saves a bi-encoder's labels tokenizer, beside the text encoder's own.
LABELS_TOKENIZER_DIR = "labels_tokenizer"
# The prefix of a bi-encoder's labels encoder tensors, and of the projection after it.
LABELS_ENCODER_PREFIX = "token_rep_layer.labels_encoder.model."
LABELS_PROJECTION_PREFIX = "token_rep_layer.labels_projection."

# What SIE implements of GLiNER: uni-encoder span and token models, bi-encoder span models.
SPAN_MODES = ("marker", "markerV0", "markerV1", "token_level")
SUBTOKEN_POOLINGS = ("first", "last", "mean", "max")


def is_gliner_dir(root: Path) -> bool:
    return (Path(root) / GLINER_CONFIG).is_file()


detects = is_gliner_dir  # the layout registry's question (sie_engine.models.LAYOUTS)


def read_gliner_config(root: Path) -> dict:
    return json.loads((Path(root) / GLINER_CONFIG).read_text())


@dataclass(frozen=True)
class GlinerConfig:
    """The settings of a GLiNER (uni-encoder, or bi-encoder when `labels_encoder` is set), with
    GLiNER's defaults."""

    hidden_size: int = 512  # width of word, span and label representations
    max_width: int = 12  # longest span, in words
    span_mode: str = "markerV0"
    subtoken_pooling: str = "first"  # how a word's sub-tokens make its vector
    num_rnn_layers: int = 1  # bidirectional LSTM layers over the words (0: none)
    embed_ent_token: bool = True  # label vector from <<ENT>> itself, else from the token after it
    class_token_index: int = -1  # token id of <<ENT>>; -1: look it up in the tokenizer
    ent_token: str = "<<ENT>>"
    sep_token: str = "<<SEP>>"
    max_len: int = 384  # words per sequence GLiNER was trained with: SIE's window, in words
    words_splitter_type: str = "whitespace"
    model_name: str = ""  # the backbone's repository or path
    # bi-encoders: the labels encoder's repository or path (its tokenizer) and its config.json
    labels_encoder: str = ""
    labels_encoder_config: Mapping[str, Any] | None = field(default=None, compare=False)  # a dict: not hashed

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> GlinerConfig:
        """Parse and validate `gliner_config.json`; unsupported settings raise naming the field."""
        unsupported = {
            "labels_decoder": "GLiNER with a label decoder",
            "relations_layer": "GLiNER relation extraction",
            "span_encoder_config": "a span context encoder",
            "post_fusion_schema": "post-fusion layers",
            "fuse_layers": "fused backbone layers",
            "precomputed_prompts_mode": "precomputed prompts",
        }
        refuse_settings(config, unsupported, "gliner_config.json")
        model_type = config.get("model_type")
        if model_type not in (None, "gliner", "gliner_uni_encoder_span", "gliner_uni_encoder_token",
                              "gliner_bi_encoder_span"):
            raise ValueError(f"gliner_config.json: model_type={model_type!r} is not supported "
                             "(only uni-encoder span and token models and bi-encoder span models)")
        span_mode = config.get("span_mode", "markerV0")
        if model_type == "gliner_uni_encoder_token":
            span_mode = "token_level"
        labels_encoder = config.get("labels_encoder") or ""
        if labels_encoder:
            _check_bi_encoder(config, span_mode)
        if span_mode == "token_level" and config.get("represent_spans"):
            raise ValueError("gliner_config.json: represent_spans=True (token model with a span layer) "
                             "is not supported")
        if span_mode not in SPAN_MODES:
            raise ValueError(f"gliner_config.json: span_mode={span_mode!r} is not supported "
                             f"(supported: {', '.join(SPAN_MODES)})")
        pooling = config.get("subtoken_pooling", "first")
        if pooling not in SUBTOKEN_POOLINGS:
            raise ValueError(f"gliner_config.json: subtoken_pooling={pooling!r} is not one of {SUBTOKEN_POOLINGS}")
        splitter = config.get("words_splitter_type", "whitespace")
        if splitter != "whitespace":
            raise ValueError(f"gliner_config.json: words_splitter_type={splitter!r} is not supported "
                             "(only 'whitespace')")
        return GlinerConfig(
            hidden_size=int(config.get("hidden_size", 512)),
            max_width=int(config.get("max_width", 12)),
            span_mode=span_mode,
            subtoken_pooling=pooling,
            num_rnn_layers=int(config.get("num_rnn_layers", 1)),
            embed_ent_token=bool(config.get("embed_ent_token", True)),
            class_token_index=int(config.get("class_token_index", -1)),
            ent_token=config.get("ent_token", "<<ENT>>"),
            sep_token=config.get("sep_token", "<<SEP>>"),
            max_len=int(config.get("max_len", 384)),
            words_splitter_type=splitter,
            model_name=str(config.get("model_name", "")),
            labels_encoder=str(labels_encoder),
            labels_encoder_config=config.get("labels_encoder_config") if labels_encoder else None,
        )

    @property
    def bi_encoder(self) -> bool:
        """Labels encoded by their own encoder, not in the text's prompt (gliner-bi-*, modern-gliner-bi-*)."""
        return bool(self.labels_encoder)

    @property
    def token_level(self) -> bool:
        """Token models score each word as start / end / inside of each label (NuNER Zero)."""
        return self.span_mode == "token_level"

    @property
    def prompt_tokens(self) -> tuple[str, ...]:
        return EXTRA_TOKENS + (self.ent_token, self.sep_token)


def _check_bi_encoder(config: Mapping[str, Any], span_mode: str) -> None:
    """A bi-encoder SIE computes: a span model whose labels encoder's config was saved with it."""
    if span_mode == "token_level":
        raise ValueError("gliner_config.json: a bi-encoder token model (labels_encoder with span_mode "
                         "token_level) is not supported (bi-encoder span models are)")
    if not isinstance(config.get("labels_encoder_config"), Mapping):
        raise ValueError("gliner_config.json: labels_encoder is set but labels_encoder_config is missing: "
                         "the labels encoder's architecture is unknown")


def labels_tokenizer_source(root: Path, config: GlinerConfig) -> Path:
    """A bi-encoder's labels tokenizer: saved beside the checkpoint (`labels_tokenizer/`), else the
    labels encoder's own repository."""
    saved = Path(root) / LABELS_TOKENIZER_DIR
    if (saved / "tokenizer_config.json").is_file() or (saved / "tokenizer.json").is_file():
        return saved
    return model_name_source(config.labels_encoder)


def load_gliner_config(root: Path) -> GlinerConfig:
    return GlinerConfig.from_dict(read_gliner_config(root))


def backbone_source(root: Path) -> Path:
    """Directory of the backbone's own repository (config, tokenizer) for saves that lack them."""
    model_name = read_gliner_config(root).get("model_name")
    if not model_name:
        raise ValueError(f"{root}/{GLINER_CONFIG} has neither encoder_config nor model_name: no backbone config")
    return model_name_source(model_name)


def model_name_source(model_name: str) -> Path:
    """A backbone named by a head's config (`model_name`): a local directory, or its config and
    tokenizer from the hub (the backbone's weights are inside the head's checkpoint)."""
    local = Path(model_name).expanduser()
    if local.is_dir():
        return local
    return _from_hub(model_name, None, list(BACKBONE_FILES))


def backbone_config(root: Path) -> dict:
    """The backbone's config.json contents for a GLiNER directory, with the vocabulary size
    the checkpoint was saved with (GLiNER grows it by its prompt tokens)."""
    return dict(_backbone_config(Path(root)))


@lru_cache(maxsize=64)  # read at tokenizer load, memory planning and model load; may mmap the checkpoint
def _backbone_config(root: Path) -> dict:
    gliner = read_gliner_config(root)
    encoder = gliner.get("encoder_config")
    if encoder:
        config = dict(encoder)
        config.setdefault("model_type", "deberta-v2")  # GLiNER's default for an encoder_config without one
    else:
        config = json.loads((backbone_source(root) / "config.json").read_text())
    vocab = int(gliner.get("vocab_size", -1))
    config["vocab_size"] = vocab if vocab > 0 else checkpoint_vocab_size(root)
    return config


def checkpoint_vocab_size(root: Path) -> int:
    """Rows of the backbone's word embeddings as saved (read from the file's header or mmap)."""
    import torch
    from safetensors import safe_open

    for path in weight_files(Path(root)):
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt") as handle:
                for name in handle.keys():
                    if name.endswith("embeddings.word_embeddings.weight"):
                        return int(handle.get_slice(name).get_shape()[0])
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
            for name, tensor in state.items():
                if name.endswith("embeddings.word_embeddings.weight"):
                    return int(tensor.shape[0])
    raise ValueError(f"{root}: no '*embeddings.word_embeddings.weight' tensor in the checkpoint")


def has_tokenizer(root: Path) -> bool:
    return (Path(root) / "tokenizer_config.json").is_file() or (Path(root) / "tokenizer.json").is_file()


def describe_layout(root: Path) -> CheckpointLayout:
    """The GLiNER layout (see the module docstring) of a directory that `detects` says is one."""
    source, extra_tokens = tokenizer_source(root)
    return CheckpointLayout(kind="gliner", root=root, config=backbone_config(root), tokenizer_source=source,
                            extra_tokens=extra_tokens, bos_eos=True,
                            backbone_prefix_suffix=BACKBONE_PREFIX)


def tokenizer_source(root: Path) -> tuple[Path, tuple[str, ...]]:
    """Where a GLiNER directory's tokenizer lives and which tokens must be added to it.

    A save with tokenizer files has GLiNER's tokens already; otherwise the backbone's
    tokenizer gets them, in GLiNER's order, so `<<ENT>>` lands on the id the checkpoint
    was trained with."""
    if has_tokenizer(root):
        return Path(root), ()
    return backbone_source(root), load_gliner_config(root).prompt_tokens


def local_card(name: str, root: Path) -> ModelCard:
    """The card of a card-less directory: a GLiNER checkpoint (no config.json): extraction only."""
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), outputs=("extract",), max_seq_len=512,
                     description=f"local GLiNER directory {root}")
