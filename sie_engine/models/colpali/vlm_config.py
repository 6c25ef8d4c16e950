"""config.json of a ColVision retriever (`*ForRetrieval`: ColPali, ColQwen2), completed by
transformers' config classes (a published config.json lists only what differs from their
defaults): the retriever's config, its VLM's text and vision configs, and the decoder as
models/qwen/model.py's config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..qwen.model import QwenConfig, decoder_shape


class RetrieverConfig:
    """What a retriever's typed config answers from its decoder (`text`): its width and window."""

    text: QwenConfig
    towers = ("text", "image")

    @property
    def hidden_size(self) -> int:
        return self.text.hidden_size

    @property
    def max_seq_len(self) -> int:
        return self.text.max_position_embeddings


def complete_config(config: Mapping[str, Any], model_type: str, vlm_type: str,
                    only: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(the full retriever config, its `vlm_config.text_config` and `vision_config` as dicts);
    ValueError naming the field where the model type or VLM is another (`only`: what is supported)."""
    from transformers import CONFIG_MAPPING

    if config.get("model_type") != model_type:
        raise ValueError(f"model_type={config.get('model_type')!r} is not a {model_type} checkpoint")
    full = CONFIG_MAPPING[model_type].from_dict(dict(config))
    vlm = full.vlm_config
    if vlm.model_type != vlm_type:
        raise ValueError(f"vlm_config.model_type={vlm.model_type!r}: {only}")
    return full, vlm.text_config.to_dict(), vlm.vision_config.to_dict()


def decoder_config(text: Mapping[str, Any], *, hidden_act: str, max_positions: int, rope_theta: float,
                   **blocks: Any) -> QwenConfig:
    """The VLM's decoder (`text_config`) as a QwenConfig; `hidden_act`, `max_positions`, `rope_theta`:
    the text config class's defaults; `blocks`: the family's biases and attention (QwenConfig's fields)."""
    rope = text.get("rope_parameters") or {}
    if (rope.get("rope_type") or "default") != "default":
        raise ValueError(f"rope_type={rope.get('rope_type')!r} is not supported (only 'default')")
    return QwenConfig(**decoder_shape(text, positions=max_positions, hidden_act=hidden_act, rope_theta=rope_theta,
                                      rope=rope), **blocks)
