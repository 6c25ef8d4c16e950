"""colpali-engine's ColQwen2 / ColQwen2.5 checkpoints (illuin-tech/colpali, the code that trained
vidore's retrievers), served by the colqwen2 family as transformers' ColQwen2ForRetrieval is:

- A base or merged checkpoint (vidore/colqwen2.5-base, vidore/colqwen2-base): a config.json of
  Qwen2-VL or Qwen2.5-VL naming architecture ColQwen2 / ColQwen2_5, tensors `model.*` (or
  `language_model.*`, as colpali-engine saves under newer transformers), `visual.*` and
  `custom_text_proj.*`. Read as transformers' conversion script (convert_colqwen2_weights_to_hf.py)
  renames them (the decoder under `vlm.language_model.`, the tower under `vlm.visual.`, the projection
  as `embedding_proj_layer`), in a ColQwen2Config of that VLM and the projection's width.
- A PEFT LoRA adapter on such a base (vidore/colqwen2.5-v0.2, vidore/colqwen2-v1.0): adapter_config.json
  names the base (`base_model_name_or_path`: a hub id, or a local directory); its deltas are merged
  into the base's weights as they are read, as peft's `merge_and_unload` does (W + scaling * B @ A),
  and a `modules_to_save` module's saved copy replaces the base's. The adapter's own processor and
  tokenizer files are used where it has them, else the base's.
- What colpali-engine runs where transformers' port differs: pages get get_rope_index's 3D M-RoPE
  positions (the family's `mrope_positions`), and a query is the prefix, the text and 10 pad tokens
  with no "\\n" after them (`query_newline` false: colpali-engine's `process_queries`; transformers'
  ColQwen2Processor appends one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from ...card import ModelCard, WeightsSource
from ...checkpoints.layout import CheckpointLayout, read_config_json
from ...lora import CONFIG_FILE, PEFT_PREFIX, WEIGHTS_FILE, lora_pairs, read_config, scaling
from ...weights import adapter_base, resolve_source, tensor_shapes, weight_files
from .card import colqwen2_card
from .model import MROPE_SWITCH

KIND = "colpali-engine"
ARCHITECTURES = ("ColQwen2", "ColQwen2_5")
PROJECTION = "custom_text_proj."
# colpali-engine's tensor names -> ColQwen2ForRetrieval's (transformers 5), first match wins
RENAMES = (("custom_text_proj.", "embedding_proj_layer."), ("model.language_model.", "vlm.language_model."),
           ("model.visual.", "vlm.visual."), ("model.", "vlm.language_model."),
           ("language_model.", "vlm.language_model."), ("visual.", "vlm.visual."), ("lm_head.", "vlm.lm_head."))
QUERY_NEWLINE = "query_newline"  # a layout config key ColQwen2Inputs reads (the colqwen2 config ignores it)


def detects(root: Path) -> bool:
    """A colpali-engine ColQwen2 / ColQwen2.5 directory, or a PEFT adapter without a config.json of
    its own (served over the base it names)."""
    root = Path(root)
    config = read_config_json(root)
    if config is None:
        return (root / CONFIG_FILE).is_file()
    return any(name in ARCHITECTURES for name in config.get("architectures") or ())


def describe_layout(root: Path) -> CheckpointLayout:
    root = Path(root)
    adapter = root if read_config_json(root) is None else None
    base = _base_of(root) if adapter is not None else root
    config = read_config_json(base) or {}
    widths = [shape[0] for name, shape, _, _ in tensor_shapes(tuple(weight_files(base)))
              if name == PROJECTION + "weight"]
    if not widths:
        raise ValueError(f"{base}: a colpali-engine checkpoint without {PROJECTION}weight (its projection)")
    vlm = {key: value for key, value in config.items() if key != "architectures"}
    # the processor and tokenizer the adapter carries (vidore's do), else the base's
    files_root = adapter if adapter is not None and (adapter / "preprocessor_config.json").is_file() else base
    return CheckpointLayout(
        kind=KIND, root=files_root, weights_root=base,
        tokenizer_source=files_root if (files_root / "tokenizer_config.json").is_file() else base,
        config={"model_type": "colqwen2", "vlm_config": vlm, "embedding_dim": widths[0],
                MROPE_SWITCH: True, QUERY_NEWLINE: False},
        view=lambda files: ColpaliEngineTensors(files, adapter))


def local_card(name: str, root: Path) -> ModelCard:
    """The card of a colpali-engine directory given as `--model NAME=PATH` (an adapter or a base): the
    colqwen2 family's, its weights the directory itself (an adapter's base is found again at load)."""
    layout = describe_layout(root)
    return dataclasses.replace(colqwen2_card(name, layout.root, layout.config), weights=WeightsSource(path=str(root)),
                               description=f"local colpali-engine ColQwen directory {root} (page images and queries)")


def _base_of(adapter: Path) -> Path:
    """The base directory an adapter names (a local directory, or a hub repository, fetched once its
    config.json says it is a colpali-engine ColQwen: any other base is refused before its weights come)."""
    base = adapter_base(adapter)
    if base is None:
        raise ValueError(f"{adapter / CONFIG_FILE} names no base_model_name_or_path: SIE cannot tell which "
                         "colpali-engine base its deltas apply to")
    what = f"the base {base.describe()} of adapter {adapter}"
    config = read_config_json(resolve_source(base, what, hub_patterns=["config.json"] if base.hub else None)) or {}
    if not any(name in ARCHITECTURES for name in config.get("architectures") or ()):
        raise ValueError(f"{adapter}: a PEFT adapter is served as a model's weights only over a colpali-engine "
                         f"ColQwen2 / ColQwen2.5 base ({base.describe()} names {config.get('architectures')}); serve "
                         "other adapters as a card's `adapters` over their base model's card")
    return resolve_source(base, what)


def renamed(name: str) -> str:
    """A colpali-engine tensor name as ColQwen2ForRetrieval names it."""
    for old, new in RENAMES:
        if name.startswith(old):
            return new + name[len(old):]
    return name


class ColpaliEngineTensors(Mapping):
    """A colpali-engine checkpoint's tensors under ColQwen2ForRetrieval's names, an adapter's deltas
    merged into each weight as it is read (in float32, then cast back to the weight's dtype). The
    adapter's names are matched to the base's after both are renamed, so an adapter saved under
    either of colpali-engine's layouts fits a base saved under the other."""

    def __init__(self, files: Mapping[str, torch.Tensor], adapter: Path | None):
        self._files = files
        self._names = {renamed(name): name for name in files}
        self._deltas: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}
        self._replaced: dict[str, torch.Tensor] = {}
        if adapter is not None:
            self._read_adapter(adapter)

    def _read_adapter(self, root: Path) -> None:
        from safetensors import safe_open

        config = read_config(root, merging=True)
        errors: list[str] = []
        with safe_open(str(root / WEIGHTS_FILE), framework="pt") as tensors:
            keys = list(tensors.keys())
            saved = [key for key in keys if ".lora_" not in key]  # modules_to_save copies: whole tensors
            for key in saved:
                name = renamed(key.removeprefix(PEFT_PREFIX))
                if name not in self._names:
                    errors.append(f"{key}: the base has no tensor {key.removeprefix(PEFT_PREFIX)}")
                    continue
                self._replaced[name] = tensors.get_tensor(key)
            for module, (a_name, b_name) in lora_pairs([k for k in keys if k not in saved], errors).items():
                name = renamed(module + ".weight")
                if name not in self._names:
                    errors.append(f"{a_name}: the base has no module {module}")
                    continue
                a, b = tensors.get_tensor(a_name), tensors.get_tensor(b_name)
                self._deltas[name] = (a, b, scaling(config, a.shape[0]))
        if errors:
            raise ValueError(f"LoRA adapter {root} does not fit its base:\n  " + "\n  ".join(errors))

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = self._replaced.get(name)
        if tensor is None:
            tensor = self._files[self._names[name]]
        delta = self._deltas.get(name)
        if delta is None:
            return tensor
        a, b, scale = delta
        if tuple(tensor.shape) != (b.shape[0], a.shape[1]):
            raise ValueError(f"adapter delta for {self._names[name]}: B {tuple(b.shape)} @ A {tuple(a.shape)} does "
                             f"not fit the base's {tuple(tensor.shape)}")
        return (tensor.float() + (b.float() @ a.float()) * scale).to(tensor.dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


def query_newline(config: Mapping[str, Any]) -> bool:
    """Whether a query ends with "\\n" after its pads (transformers' processor) or not (colpali-engine's)."""
    return bool(config.get(QUERY_NEWLINE, True))
