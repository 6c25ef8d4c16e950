"""Model cards: the small declarative description of a model SIE can serve.

A card says where the weights come from, which architecture family runs them,
which outputs the model offers and how to turn hidden states into those
outputs (pooling, normalisation, templates). Cards live as one YAML file per
model in `sie_engine/catalog/` and in user directories (`--models DIR`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from .errors import InvalidRequest

ENCODE_OUTPUTS = ("dense", "sparse", "multivector")
ALL_OUTPUTS = ENCODE_OUTPUTS + ("score", "extract")
POOLINGS = ("cls", "mean", "last", "max", "weightedmean", "mean_sqrt_len", "none")
# Compute precision. "int8": float32 weights with dynamically quantised linear layers (CPU only).
DTYPES = ("auto", "float32", "float16", "bfloat16", "int8")


@dataclass(frozen=True)
class WeightsSource:
    """Where a model's files come from; exactly one of `hub`, `package`, `path`.

    - hub: a Hugging Face repository id, fetched through huggingface_hub (its cache,
      `HF_HUB_OFFLINE` and `HF_HOME` are honoured).
    - package: an installed Python package shipping the files; `path` is then the
      folder inside the package.
    - path: a local directory in the Hugging Face layout.
    """

    hub: str | None = None
    revision: str | None = None
    package: str | None = None
    path: str | None = None

    def describe(self) -> str:
        if self.package:
            return f"package {self.package}/{self.path or ''}"
        if self.hub:
            return f"hub {self.hub}@{self.revision or 'main'}"
        return f"path {self.path}"


@dataclass(frozen=True)
class ModelCard:
    id: str
    weights: WeightsSource
    # Architecture family (a key of sie_engine.arch.FAMILIES). None: read it from
    # config.json's `architectures` when the model loads.
    family: str | None = None
    # What the model offers: dense / sparse / multivector (encode), score, extract.
    outputs: tuple[str, ...] = ("dense",)
    # cls | mean | last | max | weightedmean | mean_sqrt_len (sentence-transformers' modes),
    # none for models without a pooled output
    pooling: str = "mean"
    normalize: bool = True
    max_seq_len: int = 512
    # Dense dimension (informational; the loaded model is the truth) and the
    # Matryoshka sizes the model was trained for.
    dims: int | None = None
    matryoshka_dims: tuple[int, ...] = ()
    # Applied to the text before tokenisation. `{text}` is the input and
    # `{instruction}` the (request's or card's) query instruction.
    query_template: str = "{text}"
    document_template: str = "{text}"
    query_instruction: str | None = None
    # "auto": float16 on CUDA, float32 on CPU. bfloat16 is the fast CPU mode where the CPU
    # has bf16 instructions; int8 quantises linear layers dynamically (CPU). Requests may ask
    # for another precision per call (`precision`), served as a variant of this card.
    dtype: str = "auto"
    # Token budget of one batch; also sizes the activation reserve in the pool.
    max_batch_tokens: int = 16384
    trust_remote_code: bool = False
    # Head-specific settings (sparse, multivector, score, extract heads).
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        for output in self.outputs:
            if output not in ALL_OUTPUTS:
                raise ValueError(f"card {self.id}: unknown output {output!r} (known: {', '.join(ALL_OUTPUTS)})")
        if not self.outputs:
            raise ValueError(f"card {self.id}: outputs must not be empty")
        if self.pooling not in POOLINGS:
            raise ValueError(f"card {self.id}: pooling {self.pooling!r} not one of {POOLINGS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"card {self.id}: dtype {self.dtype!r} not one of {DTYPES}")
        if self.max_seq_len <= 0 or self.max_batch_tokens < self.max_seq_len:
            raise ValueError(f"card {self.id}: need 0 < max_seq_len <= max_batch_tokens")

    @property
    def tasks(self) -> tuple[str, ...]:
        tasks = []
        if any(o in ENCODE_OUTPUTS for o in self.outputs):
            tasks.append("encode")
        if "score" in self.outputs or "multivector" in self.outputs:
            tasks.append("score")
        if "extract" in self.outputs:
            tasks.append("extract")
        return tuple(tasks)

    @property
    def encode_outputs(self) -> tuple[str, ...]:
        return tuple(o for o in self.outputs if o in ENCODE_OUTPUTS)

    def template_for(self, is_query: bool, instruction: str | None) -> tuple[str, str | None]:
        """The template and instruction to apply to a text."""
        if is_query:
            return self.query_template, instruction if instruction is not None else self.query_instruction
        return self.document_template, None

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "ModelCard":
        data = dict(data)
        unknown = set(data) - {f.name for f in dataclasses.fields(ModelCard)}
        if unknown:
            raise ValueError(f"card {data.get('id')}: unknown fields {sorted(unknown)}")
        if "id" not in data:
            raise ValueError("card without id")
        weights = data.get("weights") or {"hub": data["id"]}
        if isinstance(weights, str):
            weights = {"path": weights}
        data["weights"] = WeightsSource(**weights)
        for key in ("outputs", "matryoshka_dims"):
            if key in data:
                data[key] = tuple(data[key])
        return ModelCard(**data)

    @staticmethod
    def from_file(path: Path) -> "ModelCard":
        return ModelCard.from_dict(yaml.safe_load(Path(path).read_text()))


def card_from_local_dir(name: str, path: str | Path) -> ModelCard:
    """A card for a Hugging Face-layout directory without one.

    The family comes from config.json `architectures` at load time; pooling and
    normalisation from sentence-transformers' `modules.json` and
    `1_Pooling/config.json` where present, otherwise the family's usual default
    (mean pooling, normalised, for encoders); query and document prompts from
    `config_sentence_transformers.json`.
    """
    root = Path(path).expanduser().resolve()
    if (root / "gliner_config.json").is_file():  # a GLiNER checkpoint (no config.json): extraction only
        return ModelCard(id=name, weights=WeightsSource(path=str(root)), outputs=("extract",), max_seq_len=512,
                         description=f"local GLiNER directory {root}")
    config_path = root / "config.json"
    if not config_path.is_file():
        raise ValueError(f"{root} has no config.json: not a Hugging Face model directory")
    config = json.loads(config_path.read_text())
    st = read_sentence_transformers_layout(root)
    outputs: tuple[str, ...] = ("dense",)
    architectures = config.get("architectures") or []
    if any(a.endswith("ForSequenceClassification") for a in architectures) and st is None:
        outputs = ("score",)
    elif any(a.endswith("ForMaskedLM") for a in architectures) and st is None:
        outputs = ("sparse",)
    pooling = "mean"
    normalize = True
    max_seq_len = int(config.get("max_position_embeddings", 512))
    if config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        max_seq_len -= int(config.get("pad_token_id", 1)) + 1
    if config.get("model_type", "").startswith("qwen"):
        pooling, max_seq_len = "last", min(max_seq_len, 8192)
    if config.get("model_type") == "nomic_bert" and "n_positions" in config:  # Nomic's own config layout
        max_seq_len = int(config["n_positions"])
    if st is not None:
        pooling = st.get("pooling", pooling)
        normalize = st.get("normalize", False)
        max_seq_len = st.get("max_seq_length", max_seq_len)
    query_prompt, document_prompt = read_sentence_transformers_prompts(root)
    if (query_prompt or document_prompt) and st is not None and not st.get("include_prompt", True):
        raise ValueError(f"{root} pools without its prompt tokens (include_prompt: false in its pooling config), "
                         f"which SIE does not implement: its vectors would differ from sentence-transformers'")
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


class Catalog:
    """The cards a server knows, by id. Request model ids resolve only here."""

    def __init__(self, cards: list[ModelCard] | None = None):
        self._cards: dict[str, ModelCard] = {}
        for card in cards or []:
            self.add(card)

    @staticmethod
    def builtin() -> "Catalog":
        catalog = Catalog()
        catalog.add_directory(Path(__file__).parent / "catalog")
        return catalog

    def add(self, card: ModelCard) -> None:
        self._cards[card.id] = card

    def add_directory(self, directory: str | Path) -> list[ModelCard]:
        directory = Path(directory)
        if not directory.is_dir():
            raise ValueError(f"model card directory {directory} does not exist")
        added = []
        for path in sorted(directory.rglob("*.y*ml")):
            try:
                card = ModelCard.from_file(path)
            except (ValueError, TypeError, yaml.YAMLError) as exc:
                raise ValueError(f"invalid model card {path}: {exc}") from exc
            self.add(card)
            added.append(card)
        return added

    def get(self, model_id: str) -> ModelCard | None:
        return self._cards.get(model_id)

    def __contains__(self, model_id: str) -> bool:
        return model_id in self._cards

    def __iter__(self):
        return iter(sorted(self._cards.values(), key=lambda c: c.id))

    def __len__(self) -> int:
        return len(self._cards)


def validate_model_id(model_id: Any) -> str:
    if not isinstance(model_id, str) or not model_id or len(model_id) > 256:
        raise InvalidRequest("model must be a non-empty string of at most 256 characters", field="model")
    return model_id
