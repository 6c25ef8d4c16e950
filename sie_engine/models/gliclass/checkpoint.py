"""The GLiClass checkpoint layout and its typed config.

A GLiClass directory (knowledgator/gliclass-*) is a Hugging Face directory whose
config.json has `model_type: GLiClass`: the backbone's own config sits in it under
`encoder_config`, its tensors under `model.encoder_model.*` beside the head's
(`model.text_projector.*`, `model.classes_projector.*`, `model.scorer.*`,
`model.logit_scale`, `model.lstm.*`), and the tokenizer saved with it already holds
the prompt tokens `<<LABEL>>` (whose id is `class_token_index`) and `<<SEP>>`.

SIE implements the uni-encoder kind (one pass over labels and text together); the
settings it does not implement are refused at load, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...card import ModelCard, WeightsSource
from ...checkpoints.layout import CheckpointLayout, refuse_settings
from ...checkpoints.layout import read_config_json as read_config

MODEL_TYPE = "GLiClass"
# The prefix of the backbone's tensors inside a GLiClass checkpoint; the head's sit under its root, "model.".
BACKBONE_PREFIX = "model.encoder_model."
LABEL_TOKEN = "<<LABEL>>"  # the pipeline's prompt tokens (gliclass.pipeline.BaseZeroShotClassificationPipeline)
SEP_TOKEN = "<<SEP>>"

# What SIE implements of GLiClass's options (gliclass 0.1.21, gliclass/config.py).
POOLINGS = ("first", "last", "avg", "sum", "max", "rms", "abs_max", "abs_avg")
SCORERS = ("simple", "weighted-dot", "mlp")
CLASS_TOKEN_POOLINGS = ("first", "average")


def detects(root: Path) -> bool:
    """The layout registry's question (sie_engine.models.LAYOUTS): a config.json saying GLiClass."""
    config = read_config(root)
    return config is not None and config.get("model_type") == MODEL_TYPE


@dataclass(frozen=True)
class GliclassConfig:
    """The settings of a uni-encoder GLiClass model, with gliclass' defaults."""

    class_token_index: int
    prompt_first: bool = False  # labels before the text (else after it)
    pooling_strategy: str = "first"  # how the whole sequence's tokens make the text vector
    class_token_pooling: str = "first"  # a label's vector: its <<LABEL>> token, or the mean of its span
    embed_class_token: bool = True  # with "first": <<LABEL>> itself, else the token after it
    scorer_type: str = "simple"
    normalize_features: bool = False  # L2-normalised vectors, logits times logit_scale
    use_lstm: bool = False
    projector_hidden_act: str = "gelu"

    @staticmethod
    def from_dict(config: Mapping[str, Any]) -> GliclassConfig:
        """Parse and validate config.json; unsupported settings raise ValueError naming the field."""
        architecture = config.get("architecture_type", "uni-encoder")
        if architecture != "uni-encoder":
            raise ValueError(f"config.json: architecture_type={architecture!r} is not supported by SIE "
                             "(only uni-encoder GLiClass: labels and text in one pass)")
        unsupported = {
            "squeeze_layers": "layer-wise attention over all hidden states",
            "layer_wise": "layer-wise training",
            "extract_text_features": "text features after a <<TEXT>> token",
            "use_segment_embeddings": "segment embeddings",
            "use_calibrator": "a post-hoc calibrator",
            "multimodal": "multi-modal inputs",
        }
        refuse_settings(config, unsupported, "config.json")
        if config.get("encoder_layer_id", -1) != -1:
            raise ValueError(f"config.json: encoder_layer_id={config['encoder_layer_id']!r} (an inner layer's "
                             "states) is not supported by SIE: it reads the backbone's last layer")
        if config.get("label_model_name"):
            raise ValueError("config.json: label_model_name is set (a separate label encoder): not supported by SIE")
        choices = {"pooling_strategy": POOLINGS, "scorer_type": SCORERS, "class_token_pooling": CLASS_TOKEN_POOLINGS}
        for key, allowed in choices.items():
            value = config.get(key, allowed[0])
            if value not in allowed:
                raise ValueError(f"config.json: {key}={value!r} is not supported by SIE "
                                 f"(supported: {', '.join(allowed)})")
        if int(config.get("class_token_index", -1)) < 0:
            raise ValueError("config.json: class_token_index (the id of <<LABEL>>) is missing")
        return GliclassConfig(
            class_token_index=int(config["class_token_index"]),
            prompt_first=bool(config.get("prompt_first", False)),
            pooling_strategy=config.get("pooling_strategy", "first"),
            class_token_pooling=config.get("class_token_pooling", "first"),
            embed_class_token=bool(config.get("embed_class_token", True)),
            scorer_type=config.get("scorer_type", "simple"),
            normalize_features=bool(config.get("normalize_features", False)),
            use_lstm=bool(config.get("use_lstm", False)),
            projector_hidden_act=str(config.get("projector_hidden_act", "gelu")),
        )


def load_gliclass_config(root: Path) -> GliclassConfig:
    config = read_config(root)
    if config is None or config.get("model_type") != MODEL_TYPE:
        raise ValueError(f"{root}: not a GLiClass checkpoint (config.json with model_type {MODEL_TYPE!r})")
    return GliclassConfig.from_dict(config)


@lru_cache(maxsize=64)  # read at tokenizer load, memory planning and model load
def _backbone_config(root: Path) -> dict:
    outer = read_config(root) or {}
    encoder = outer.get("encoder_config")
    if not isinstance(encoder, Mapping) or not encoder:
        raise ValueError(f"{root}/config.json has no encoder_config: no backbone config")
    config = dict(encoder)
    config.setdefault("model_type", "deberta-v2")  # gliclass' default for an encoder_config without one
    # gliclass resizes the backbone's embeddings to the outer vocab_size (its prompt tokens added) before
    # loading the checkpoint, so that is the rows as saved
    if outer.get("vocab_size"):
        config["vocab_size"] = int(outer["vocab_size"])
    return config


def describe_layout(root: Path) -> CheckpointLayout:
    """The GLiClass layout (see the module docstring) of a directory that `detects` says is one."""
    return CheckpointLayout(kind="gliclass", root=root, config=dict(_backbone_config(Path(root))),
                            tokenizer_source=root, backbone_prefix_suffix=BACKBONE_PREFIX)


def local_card(name: str, root: Path) -> ModelCard:
    """The card of a card-less directory: a GLiClass checkpoint: zero-shot classification (extract) only."""
    return ModelCard(id=name, weights=WeightsSource(path=str(root)), outputs=("gliclass",), max_seq_len=512,
                     description=f"local GLiClass directory {root}")
