"""A card for a local Hugging Face-layout directory that has none (`--model NAME=PATH`).

What sentence-transformers' own files say is taken as it says it: pooling,
normalisation, the window and the query / document prompts; the family (and so the
positions the window may use) comes from config.json; a layout or family with a card of
its own kind (GLiNER's, CLIP's, ...) gives it (sie_engine.models' registry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .card import ModelCard, WeightsSource
from .errors import UnsupportedArchitecture
from .models import LAYOUTS, family_for, layout_module
from .models.base import Family


def card_from_local_dir(name: str, path: str | Path) -> ModelCard:
    """A card for a Hugging Face-layout directory without one.

    Each registered checkpoint layout (sie_engine.models.LAYOUTS, in order) is asked whether it
    knows the directory and gives its card; a plain Hugging Face directory's family (from
    config.json) gives the card of its kind, or, for text encoders, `encoder_card`.
    """
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise ValueError(f"{root} does not exist (a local model is a Hugging Face-layout directory with config.json)")
    for layout in LAYOUTS:
        module = layout_module(layout)
        if module.detects(root):
            return module.local_card(name, root)
    config_path = root / "config.json"
    if not config_path.is_file():
        raise ValueError(f"{root} has no config.json: not a Hugging Face model directory")
    config = json.loads(config_path.read_text())
    family: Family | None
    try:
        family = family_for(config)
    except UnsupportedArchitecture:  # reported when the model loads, after its card is listed
        family = None
    if family is not None and family.local_card is not None:
        return family.local_card(name, root, config)
    return encoder_card(name, root, config)


def encoder_card(name: str, root: Path, config: Mapping[str, Any], *, pooling: str | None = None,
                 window: int | None = None) -> ModelCard:
    """A text encoder's card: pooling and normalisation from sentence-transformers' `modules.json`
    and `1_Pooling/config.json` where present, otherwise `pooling` (default: the family's declared
    `default_pooling`, as a decoder without sentence-transformers' files embeds at its last token;
    mean for an architecture SIE does not know), normalised; `window`: the family's own window
    (default: what its positions allow, else `max_position_embeddings`); query and document
    prompts from `config_sentence_transformers.json`.
    A sequence classifier serves score (and zero-shot classification when it is an NLI model, fixed-label
    classification when it names several labels of its own), a masked LM sparse vectors."""
    st = read_sentence_transformers_layout(root)
    outputs: tuple[str, ...] = ("dense",)
    architectures = config.get("architectures") or []
    if any(a.endswith("ForSequenceClassification") for a in architectures) and st is None:
        outputs = ("score",)
        id2label = config.get("id2label") or {}
        if any(str(label).lower().startswith("entail") for label in id2label.values()):
            outputs = ("score", "zeroshot")  # an NLI model: zero-shot classification (extract) too
        elif len(id2label) > 1:
            outputs = ("score", "classifier")  # its own labels: fixed-label classification (extract) too
    elif any(a.endswith("ForMaskedLM") for a in architectures) and st is None:
        outputs = ("sparse",)
    if pooling is None:
        pooling = family_pooling(config)
    normalize = True
    max_seq_len = window or family_positions(config) or int(config.get("max_position_embeddings", 512))
    if st is not None:
        pooling = st.get("pooling", pooling)
        normalize = st.get("normalize", False)
        max_seq_len = st.get("max_seq_length", max_seq_len)
    query_prompt, document_prompt = read_sentence_transformers_prompts(root)
    # a pooling without its prompt tokens (include_prompt: false), as the dense head's option runs it
    options = {"dense": {"include_prompt": False}} if st is not None and not st.get("include_prompt", True) else {}
    return ModelCard(
        id=name,
        weights=WeightsSource(path=str(root)),
        outputs=outputs,
        pooling=pooling,
        normalize=normalize,
        query_template=query_prompt + "{text}",
        document_template=document_prompt + "{text}",
        max_seq_len=min(max_seq_len, 8192),
        max_batch_tokens=max(16384, min(max_seq_len, 8192)),
        options=options,
        description=f"local directory {root}",
    )


def read_sentence_transformers_layout(root: Path) -> dict[str, Any] | None:
    """Pooling, normalisation and max length from sentence-transformers' files, or None."""
    modules_path = root / "modules.json"
    if not modules_path.is_file():
        return None
    modules = json.loads(modules_path.read_text())
    found: dict[str, Any] = {"normalize": False}
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("Normalize"):
            found["normalize"] = True
        elif kind.endswith("Pooling"):
            pooling_config = root / module.get("path", "1_Pooling") / "config.json"
            if pooling_config.is_file():
                config = json.loads(pooling_config.read_text())
                found["pooling"] = _pooling_from_st(config)
                found["include_prompt"] = config.get("include_prompt", True)
    st_config = root / "sentence_bert_config.json"
    if st_config.is_file():
        max_len = json.loads(st_config.read_text()).get("max_seq_length")
        if max_len:
            found["max_seq_length"] = int(max_len)
    return found


def read_sentence_transformers_prompts(root: Path) -> tuple[str, str]:
    """The (query, document) prompts of `config_sentence_transformers.json`, chosen as
    sentence-transformers' `encode_query` / `encode_document` choose them: the prompt named
    "query"; the first of "document", "passage", "corpus"; else the default prompt."""
    path = root / "config_sentence_transformers.json"
    if not path.is_file():
        return "", ""
    config = json.loads(path.read_text())
    prompts = config.get("prompts") or {}
    default = prompts.get(config.get("default_prompt_name") or "", "")
    query = prompts.get("query", default)
    document = next((prompts[n] for n in ("document", "passage", "corpus") if n in prompts), default)
    return query, document


# sentence-transformers' pooling modes SIE runs, by the name its 6.x config stores, and by
# the boolean keys of earlier releases
_ST_POOLING = {"cls": "cls", "mean": "mean", "lasttoken": "last", "max": "max", "weightedmean": "weightedmean",
               "mean_sqrt_len_tokens": "mean_sqrt_len"}
_ST_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_lasttoken": "last",
    "pooling_mode_max_tokens": "max", "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
}


def _pooling_from_st(config: Mapping[str, Any]) -> str:
    """The pooling of a `1_Pooling/config.json`: sentence-transformers 6 stores `pooling_mode`
    (a name, or a list for concatenated modes); earlier releases one boolean per mode."""
    mode = config.get("pooling_mode")
    if isinstance(mode, list) and len(mode) == 1:
        mode = mode[0]
    if isinstance(mode, str) and mode in _ST_POOLING:
        return _ST_POOLING[mode]
    if mode is None:  # one boolean per mode; exactly one set
        chosen = [name for key, name in _ST_LEGACY_POOLING.items() if config.get(key)]
        if len(chosen) == 1:
            return chosen[0]
    raise ValueError(f"unsupported sentence-transformers pooling config {dict(config)} "
                     f"(SIE pools by {', '.join(sorted(_ST_POOLING))})")


def family_pooling(config: Mapping[str, Any]) -> str:
    """The family's declared default pooling (mean for an architecture SIE does not know: it is
    reported when the model loads, not here)."""
    try:
        return family_for(config).default_pooling
    except UnsupportedArchitecture:
        return "mean"


def family_positions(config: Mapping[str, Any]) -> int | None:
    """The window the architecture's positions allow (None: unknown family, or no limit);
    an unsupported architecture is reported when the model loads, not here."""
    try:
        return family_for(config).max_seq_len(config)
    except (UnsupportedArchitecture, KeyError, ValueError):
        return None
