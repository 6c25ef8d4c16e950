"""The GLiREL checkpoint layout and its typed config.

A GLiREL directory (jackboyla/glirel-large-v0) holds `glirel_config.json` and
`pytorch_model.bin`: the backbone under `token_rep_layer.bert_layer.model.*` (as in
GLiNER) beside the relation head. It carries neither the backbone's config nor its
tokenizer: the `glirel` library loads both from `model_name` (microsoft/deberta-v3-large),
adds `[FLERT]` as a special token, then `[REL]`, `[SEP]`, `[E]`, `[/E]` (those the
vocabulary lacks), and resizes the embeddings; the checkpoint's embedding rows say the
size. This module answers those questions for SIE's loader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from ...checkpoints.layout import CheckpointLayout
from ..gliner.checkpoint import BACKBONE_PREFIX, checkpoint_vocab_size, model_name_source

GLIREL_CONFIG = "glirel_config.json"
REL_TOKEN = "[REL]"
SEP_TOKEN = "[SEP]"
# Tokens the glirel library adds to the backbone's tokenizer, in its order (TokenRepLayer: [FLERT]
# first, then GLiREL.__init__'s add_tokens); the vocabulary's own [SEP] is kept.
EXTRA_TOKENS = ("[FLERT]", REL_TOKEN, SEP_TOKEN, "[E]", "[/E]")
LABEL_STRATEGIES = ("ent_token", "label", "both")
# Not "mean": glirel 1.2.1 sums a word's sub-tokens where its config says mean (its result is dropped
# for the in-place sum), while 0.x averaged them, so a checkpoint's meaning is ambiguous.
POOLINGS = ("first", "last")


def detects(root: Path) -> bool:
    """The layout registry's question (sie_engine.models.LAYOUTS): a GLiREL save has glirel_config.json."""
    return (Path(root) / GLIREL_CONFIG).is_file()


def read_glirel_config(root: Path) -> dict:
    return json.loads((Path(root) / GLIREL_CONFIG).read_text())


@dataclass(frozen=True)
class GlirelConfig:
    """The settings of GLiREL's relation head (glirel 1.2.1's model), with its defaults."""

    hidden_size: int = 768  # width of word, entity, pair and label vectors
    subtoken_pooling: str = "first"  # a word's vector: its first or last sub-token
    label_embed_strategy: str = "both"  # label vector from [REL], the label's first token, or their mean
    max_len: int = 384  # words of a text GLiREL reads (it truncates beyond): SIE's window, in words
    max_entity_pair_distance: int | None = None  # pairs (i > j) further apart in start words are not scored
    model_name: str = ""  # the backbone's repository or path

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> GlirelConfig:
        """Parse and validate `glirel_config.json`; unsupported settings raise naming the field."""
        required = {"rel_mode": "marker", "span_marker_mode": "markerv1", "scorer": "dot"}
        for key, supported in required.items():
            if config.get(key, supported) != supported:
                raise ValueError(f"{GLIREL_CONFIG}: {key}={config[key]!r} is not supported by SIE (only {supported!r})")
        for key in ("refine_prompt", "refine_relation", "add_entity_markers"):
            if config.get(key):
                raise ValueError(f"{GLIREL_CONFIG}: {key}=true is not supported by SIE")
        strategy = config.get("label_embed_strategy", "both")
        if strategy not in LABEL_STRATEGIES:
            raise ValueError(f"{GLIREL_CONFIG}: label_embed_strategy={strategy!r} is not one of {LABEL_STRATEGIES}")
        pooling = config.get("subtoken_pooling", "first")
        if pooling not in POOLINGS:
            raise ValueError(f"{GLIREL_CONFIG}: subtoken_pooling={pooling!r} is not one of {POOLINGS}")
        distance = config.get("max_entity_pair_distance")
        return GlirelConfig(
            hidden_size=int(config.get("hidden_size", 768)),
            subtoken_pooling=pooling,
            label_embed_strategy=strategy,
            max_len=int(config.get("max_len", 384)),
            max_entity_pair_distance=None if distance is None else int(distance),
            model_name=str(config.get("model_name", "")),
        )


def load_glirel_config(root: Path) -> GlirelConfig:
    return GlirelConfig.from_dict(read_glirel_config(root))


def backbone_source(root: Path) -> Path:
    """Directory of the backbone's repository (config, tokenizer): `model_name`, local or from the hub."""
    model_name = read_glirel_config(root).get("model_name")
    if not model_name:
        raise ValueError(f"{root}/{GLIREL_CONFIG} names no model_name: no backbone config or tokenizer")
    return model_name_source(model_name)


@lru_cache(maxsize=64)
def _backbone_config(root: Path) -> dict:
    config = json.loads((backbone_source(root) / "config.json").read_text())
    config["vocab_size"] = checkpoint_vocab_size(root)  # grown by the added tokens
    return config


def describe_layout(root: Path) -> CheckpointLayout:
    root = Path(root)
    return CheckpointLayout(kind="glirel", root=root, config=dict(_backbone_config(root)),
                            tokenizer_source=backbone_source(root), extra_tokens=EXTRA_TOKENS,
                            backbone_prefix_suffix=BACKBONE_PREFIX)


def local_card(name: str, root: Path) -> ModelCard:
    """The card of a card-less directory: a GLiREL checkpoint: relation extraction (extract) only."""
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), outputs=("relations",), max_seq_len=512,
                     description=f"local GLiREL directory {root}")
