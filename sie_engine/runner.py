"""A loaded model: backbone, heads and tokenizer, ready to run packed batches.

`build_runner` turns a card and its checkpoint layout into a `ModelRunner`, whose
`model` is one `nn.Module`: the backbone and an `nn.ModuleDict` of heads. Moving,
releasing and measuring a model are therefore operations on that module.
`ModelRunner.run(items)` packs the items' token ids, runs the backbone once, then
the heads the items ask for, and returns one `{head: value}` per item.
Validation happens here, at load; forward passes never check configs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .attention import AttentionBackend, select_backend
from .batch import pack, pack_images
from .card import ModelCard
from .checkpoints import CheckpointLayout, describe
from .errors import UnsupportedArchitecture
from .heads.base import Head
from .heads.context import HeadContext
from .layers.lora import LoRAAdapter, lora_batch
from .layers.weights import WeightLoadError, load_checkpoint, materialize
from .models import HEADS, family_for, head_builder, resolve
from .models.base import Backbone, Family
from .tokenizer import TextTokenizer, VocabularyLookup
from .weights import Checkpoint
from .work import WorkItem

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The dtype weights and activations are held in (int8 quantises float32 linear layers)."""
    if name == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    if name == "int8":
        if device.type != "cpu":
            raise UnsupportedArchitecture("precision int8 (dynamic quantisation) runs on the CPU only")
        return torch.float32
    return DTYPES[name]


def batch_budget(card: ModelCard, family: Family, device: torch.device, dtype: torch.dtype) -> int:
    """Real tokens per batch: the card's budget, capped for float32 on CPU (never below
    one full-length sequence) at the family's `Backbone.cpu_float32_batch_tokens` (None: no cap,
    e.g. a static embedder, which keeps no activations)."""
    cap = family.model_class.cpu_float32_batch_tokens
    if device.type == "cpu" and dtype == torch.float32 and cap is not None:
        return max(min(card.max_batch_tokens, cap), card.max_seq_len)
    return card.max_batch_tokens


def quantize_linear_int8(module: Backbone) -> Backbone:
    """Dynamic int8 quantisation of the linear layers (weights int8 per output channel,
    activations quantised per batch at run time), about 2x the float32 matmul speed on CPU.

    Layers named in the backbone's `int8_sensitive` stay float32: the projections fed by
    wide-range activations (BERT's attention and MLP output projections) lose the most
    under per-tensor activation scales (all-MiniLM-L6-v2 on 200 dev documents: min cosine
    0.90 with every layer quantised, 0.98 with those kept; 0.963 over 2,000; 2026-11-29)."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig

    sensitive = module.int8_sensitive
    spec = {
        name: per_channel_dynamic_qconfig
        for name, child in module.named_modules()
        if isinstance(child, torch.nn.Linear) and not any(name.endswith(s) for s in sensitive)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch marks the quantised tensor API deprecated, not removed
        return torch.ao.quantization.quantize_dynamic(module, spec, dtype=torch.qint8)


class LoadedModel(nn.Module):
    """A backbone and its heads (by the names work items ask for; one head module may be
    reachable under two names, e.g. ColBERT's token vectors inside its MaxSim head)."""

    def __init__(self, backbone: Backbone, heads: dict[str, Head]):
        super().__init__()
        self.backbone = backbone
        self.heads = nn.ModuleDict(heads)

    def tensors(self) -> Iterator[torch.Tensor]:
        """Every parameter and buffer once (a tied weight is one Parameter reachable twice)."""
        seen: set[int] = set()
        for tensor in [*self.parameters(), *self.buffers()]:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                yield tensor


@dataclass
class ModelRunner:
    card: ModelCard
    layout: CheckpointLayout
    family: Family
    config: Any  # the family's typed config
    model: LoadedModel
    tokenizer: VocabularyLookup
    device: torch.device
    dtype: torch.dtype
    backend: AttentionBackend
    # tokens per batch (the scheduler's budget): the card's, capped on CPU (see batch_budget)
    batch_tokens: int = 0
    # LoRA adapters the checkpoint itself holds (Backbone.checkpoint_adapters), on the CPU: what a
    # card's `adapters: {name: {checkpoint: ...}}` load from, by name
    checkpoint_adapters: Mapping[str, LoRAAdapter] = field(default_factory=dict)
    # the shortest batch it ran, seconds on the inference thread: its fixed cost per batch, which
    # says whether a lone batch gains from all CPU threads (parallelism.worth_widening)
    shortest_batch_s: float = math.inf
    # per inference thread: batches of one model may run side by side on CPU
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def backbone(self) -> nn.Module:
        return self.model.backbone

    @property
    def heads(self) -> nn.ModuleDict:
        return self.model.heads

    @property
    def dims(self) -> dict[str, int]:
        """Width of each vector output (dense, sparse vocabulary, multivector)."""
        return {name: head.dim for name, head in self.heads.items() if head.dim}

    @property
    def param_bytes(self) -> int:
        """Bytes of the weights as they are now (0 once released); shared storage counted once."""
        storages = {}
        for tensor in self.model.tensors():
            if tensor.numel():
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())

    @property
    def last_padded_tokens(self) -> int:
        """Padding the attention backend added (CPU grouping) to the last batch this thread ran."""
        return getattr(self._local, "padded_tokens", 0)  # thread-local state: 0 before this thread's first batch

    @torch.inference_mode()
    def run(self, items: Sequence[WorkItem]) -> list[dict[str, Any]]:
        """One packed forward over the items, then each head some item asks for; per item,
        `{head name: its value}` for the heads it asked for."""
        if self.device.type != "cuda":
            return self._run(items)
        with torch.cuda.stream(self._stream()):
            return self._run(items)

    def _stream(self) -> torch.cuda.Stream:
        """This inference thread's CUDA stream: batches in flight on other threads queue their
        kernels beside its own, and copying its results back waits for its kernels alone.
        It first waits for the device's default stream, where loads and swap-ins copy weights."""
        stream = getattr(self._local, "stream", None)  # thread-local state, made on the thread's first batch
        if stream is None:
            stream = self._local.stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.default_stream(self.device))
        return stream

    def _run(self, items: Sequence[WorkItem]) -> list[dict[str, Any]]:
        if items[0].pixels is not None:  # an image batch (the scheduler queues images apart from texts)
            return self._run_images(items)
        if any(it.adapter is not None for it in items):
            return self._run_adapters(items)
        return self._run_texts(items)

    def _run_adapters(self, items: Sequence[WorkItem]) -> list[dict[str, Any]]:
        """A batch whose sequences use LoRA adapters (several, and the base model, may share it):
        run sorted by adapter, so each adapter's sequences are one run of rows (one segment of the
        segmented LoRA matmul, layers/lora.py), and answered in the items' own order."""
        order = sorted(range(len(items)), key=lambda i: _adapter_key(items[i]))
        ordered = [items[i] for i in order]
        results = self._run_texts(ordered, lora_of=[it.adapter for it in ordered])
        answered: list[dict[str, Any]] = [{}] * len(items)
        for position, result in zip(order, results):
            answered[position] = result
        return answered

    def _run_texts(self, items: Sequence[WorkItem],
                   lora_of: Sequence[LoRAAdapter | None] | None = None) -> list[dict[str, Any]]:
        limited = any(it.key_len is not None for it in items)
        # a batch's items all carry segment ids or none do (the task that made them decides)
        type_ids = [it.type_ids for it in items if it.type_ids is not None] if items[0].type_ids is not None else None
        batch = pack(
            [it.ids for it in items], self.backend, self.device, type_ids,
            key_lens=[it.key_len or it.num_tokens for it in items] if limited else None,
        )
        self._local.padded_tokens = batch.attn.padded_tokens  # for the scheduler's metrics
        wanted = set().union(*(it.outputs for it in items))
        # a head may read the batch itself (a static embedder's fused table mean): no hidden states then
        reads_hidden = any(self.heads[name].reads_hidden for name in wanted)
        lora = lora_batch(lora_of, batch.seq_lens) if lora_of is not None else None
        if not reads_hidden:
            hidden = None
        elif lora is not None:
            hidden = self.backbone(batch.input_ids, batch.positions, batch.attn, batch.token_type_ids, lora=lora)
        else:
            hidden = self.backbone(batch.input_ids, batch.positions, batch.attn, batch.token_type_ids)
        per_head = {name: self.heads[name](hidden, batch, items) for name in wanted}
        return [{name: per_head[name][i] for name in it.outputs} for i, it in enumerate(items)]

    def _run_images(self, items: Sequence[WorkItem]) -> list[dict[str, Any]]:
        """The vision tower over a batch of images, then the heads (two-tower image-text models)."""
        # a model that takes each image's own patch grid (SigLIP 2 NaFlex) says so: `patch_grids`
        pixels = [it.pixels for it in items if it.pixels is not None]  # an image batch holds images only
        batch = pack_images(pixels, [it.num_tokens for it in items], self.backend, self.device,
                            self.dtype, patch_grids=self.backbone.patch_grids)
        self._local.padded_tokens = batch.attn.padded_tokens
        if self.backbone.image_prompts:  # each image inside its item's own prompt (Qwen3-VL's chat)
            hidden = self.backbone.forward_image_prompts(batch.pixel_values, batch.attn, batch.grids,
                                                         [it.ids for it in items])
        else:
            hidden = self.backbone.forward_images(batch.pixel_values, batch.attn, batch.grids)
        wanted = set().union(*(it.outputs for it in items))
        per_head = {name: self.heads[name](hidden, batch, items) for name in wanted}
        return [{name: per_head[name][i] for name in it.outputs} for i, it in enumerate(items)]

    def _move(self, fn) -> None:
        for tensor in self.model.tensors():
            tensor.data = fn(tensor.data)

    def release(self) -> None:
        """Free the weights now (eviction), without waiting for the garbage collector:
        a full gc pass costs about a second in a process that imported transformers."""
        empty = torch.empty(0, device=self.device)
        self._move(lambda _: empty)

    def offload(self) -> None:
        """Move the weights to host memory (pinned, for fast copies back) for the host cache.
        On the CPU they already are in host memory: nothing moves."""
        if self.device.type != "cpu":
            self._move(lambda t: t.to("cpu").pin_memory())

    def restore(self) -> ModelRunner:
        """Bring offloaded weights back to the device (swap-in from the host cache)."""
        if self.device.type != "cpu":
            self._move(lambda t: t.to(self.device, non_blocking=True))
            torch.cuda.synchronize(self.device)
        return self


def _adapter_key(item: WorkItem) -> str:
    """Sequences of one adapter next to each other; the base model's first."""
    return "" if item.adapter is None else "+" + item.adapter.name


def tokenizer_window(card: ModelCard, layout: CheckpointLayout, family: Family) -> int:
    """Tokens per sequence: the card's window, within what the family's positions allow."""
    positions = family.max_seq_len(layout.config)
    return min(card.max_seq_len, positions) if positions else card.max_seq_len


def load_tokenizer(card: ModelCard, layout: CheckpointLayout) -> VocabularyLookup:
    family: Family = family_for(layout.config, card.family)  # an unsupported architecture is the error to report first
    make = family.tokenizer or TextTokenizer  # a family with its own input preparation (static embedders) brings it
    inputs = make(layout, tokenizer_window(card, layout, family), trust_remote_code=card.trust_remote_code)
    if "video" in card.modalities and not inputs.reads_video:
        raise ValueError(f"card {card.id}: modalities name video, but the {family.name} family reads no video "
                         "(Qwen3-VL-Embedding's does)")
    return inputs


def with_backbone_overrides(card: ModelCard, layout: CheckpointLayout) -> CheckpointLayout:
    """The layout with the card's `options.backbone` laid over its config.json: for checkpoints whose
    remote code runs otherwise than their config.json says (stella_en_1.5B_v5's modeling code attends
    bidirectionally; its config.json carries no `is_causal: false`). SIE never runs that code."""
    overrides = (card.options or {}).get("backbone")
    if not overrides:
        return layout
    if not isinstance(overrides, Mapping) or not all(isinstance(k, str) for k in overrides):
        raise ValueError(f"card {card.id}: options.backbone must map config.json keys to values")
    return dataclasses.replace(layout, config={**layout.config, **overrides})


def new_backbone(family: Family, typed_config: Any, device: torch.device,
                 dtype: torch.dtype) -> tuple[Backbone, AttentionBackend]:
    """A family's backbone, its parameters allocated on `device` (not yet loaded), and its attention
    backend. A head with an encoder of its own (GLiNER bi-encoders' labels encoder) builds it here too."""
    backend = family.model_class.attention_backend(device, dtype)  # a family without attention plans its own
    if backend is None:
        backend = select_backend(device, dtype, bias_group_tokens=family.model_class.attention_bias_group_tokens)
    with torch.device("meta"):
        backbone = family.model_class(typed_config, backend)
    return materialize(backbone, device, dtype).eval(), backend


def build_runner(card: ModelCard, layout: CheckpointLayout | Path, device: torch.device,
                 tokenizer: VocabularyLookup | None = None) -> ModelRunner:
    """A ready model from its card and checkpoint (a layout, or a directory to describe)."""
    if not isinstance(layout, CheckpointLayout):
        layout = describe(layout)
    layout = with_backbone_overrides(card, layout)
    family: Family = family_for(layout.config, card.family)
    dtype = resolve_dtype(card.dtype, device)
    typed_config = family.config_from_hf(layout.config)
    backbone, backend = new_backbone(family, typed_config, device, dtype)
    if tokenizer is None:
        tokenizer = load_tokenizer(card, layout)
    with Checkpoint(layout.weight_files) as files:  # tensors stream from the files, one at a time
        checkpoint = layout.tensors(files)
        report = load_checkpoint(backbone, checkpoint, backbone.weight_spec)
        if not report.prefix.endswith(layout.backbone_prefix_suffix):
            raise WeightLoadError(f"the backbone's tensors sit under {report.prefix!r}; a {layout.kind} checkpoint "
                                  f"keeps them under '*{layout.backbone_prefix_suffix}'")
        checkpoint_adapters = backbone.checkpoint_adapters(checkpoint, report.prefix)
        if card.dtype == "int8":  # before the heads: a head tied to the backbone ties to the quantised copy
            backbone = quantize_linear_int8(backbone)
        context = HeadContext(card=card, root=layout.root, hf_config=layout.config, config=typed_config,
                              checkpoint=checkpoint, prefix=report.prefix, backbone=backbone, tokenizer=tokenizer,
                              device=device, dtype=dtype)
        heads: dict[str, Head] = {}
        for output in card.outputs:
            own = family.head_target(output)
            if own is None and output not in HEADS:
                raise UnsupportedArchitecture(f"{card.id}: output {output!r} has no head implementation yet")
            built = (resolve(own) if own is not None else head_builder(output))(context)
            for name, head in built.items():
                if not isinstance(head, Head):  # its declarations (dim, reads_hidden) are what the runner reads
                    raise TypeError(f"the {output!r} head builder returned {type(head).__name__} for {name!r}, "
                                    "not a sie_engine.heads.base.Head")
            heads.update(built)
    return ModelRunner(
        card=card, layout=layout, family=family, config=typed_config, model=LoadedModel(backbone, heads),
        tokenizer=tokenizer, device=device, dtype=dtype, backend=backend,
        batch_tokens=batch_budget(card, family, device, dtype), checkpoint_adapters=checkpoint_adapters,
    )


__all__ = ["LoadedModel", "ModelRunner", "build_runner", "new_backbone", "load_tokenizer", "resolve_dtype",
           "WeightLoadError"]
