"""A loaded model: backbone, heads and tokenizer, ready to run packed batches.

`build_runner` turns a card and its resolved directory into a `ModelRunner`;
`ModelRunner.run(task, items)` packs the items' token ids, runs the backbone
once, then the heads the items ask for, and returns one result per item.
Validation happens here, at load; forward passes never check configs.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .arch import Family, family_for
from .arch.weights import WeightLoadError, load_checkpoint, materialize
from .attention import AttentionBackend, select_backend
from .batch import PackedBatch, pack
from .card import ModelCard
from .errors import UnsupportedArchitecture
from .tokenizer import TextTokenizer
from .weights import iter_tensors, read_config

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


# float32 batches on CPU run fastest at about 2,048 tokens: the activations of a batch
# (MiniLM's [T, 1536] MLP intermediate is 12 MiB at T = 2,048) then stay in cache between
# the matmul and the elementwise passes. all-MiniLM-L6-v2 on the 2-core box, 2026-11-29:
# 8,192 tokens ~8,000 tokens/s, 2,048 ~9,350, 1,024 ~8,900; bfloat16 is best at 8,192.
CPU_FLOAT32_BATCH_TOKENS = 2048


def batch_budget(card: ModelCard, device: torch.device, dtype: torch.dtype) -> int:
    """Real tokens per batch: the card's budget, capped for float32 on CPU (never below
    one full-length sequence)."""
    if device.type == "cpu" and dtype == torch.float32:
        return max(min(card.max_batch_tokens, CPU_FLOAT32_BATCH_TOKENS), card.max_seq_len)
    return card.max_batch_tokens


def quantize_linear_int8(module: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantisation of the linear layers (weights int8 per output channel,
    activations quantised per batch at run time), about 2x the float32 matmul speed on CPU.

    Layers named in the backbone's `int8_sensitive` stay float32: the projections fed by
    wide-range activations (BERT's attention and MLP output projections) lose the most
    under per-tensor activation scales (all-MiniLM-L6-v2 on 200 dev documents: min cosine
    0.90 with every layer quantised, 0.98 with those kept; 0.963 over 2,000; 2026-11-29)."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig

    sensitive = getattr(module, "int8_sensitive", ())
    spec = {
        name: per_channel_dynamic_qconfig
        for name, child in module.named_modules()
        if isinstance(child, torch.nn.Linear) and not any(name.endswith(s) for s in sensitive)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch marks the quantised tensor API deprecated, not removed
        return torch.ao.quantization.quantize_dynamic(module, spec, dtype=torch.qint8)


@dataclass(eq=False)
class WorkItem:
    """One sequence of a request, as the scheduler queues it."""

    request: Any  # scheduler.Request
    index: int  # position in the request
    ids: np.ndarray  # int32 token ids
    type_ids: np.ndarray | None = None
    outputs: frozenset = frozenset()
    extra: Any = None  # task-specific data for the task's head
    # attention keys limited to the first key_len tokens (ColBERT query expansion); None: all
    key_len: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.ids)


# A task head: (runner, hidden [T, H], batch, items) -> one result per item.
TaskHead = Callable[["ModelRunner", torch.Tensor, PackedBatch, Sequence[WorkItem]], list]


@dataclass
class ModelRunner:
    card: ModelCard
    root: Path
    family: Family
    config: Any  # the family's typed config
    backbone: torch.nn.Module
    tokenizer: TextTokenizer
    device: torch.device
    dtype: torch.dtype
    backend: AttentionBackend
    # encode outputs: name -> fn(hidden, batch) -> [B, ...] tensor or per-sequence list
    output_heads: dict[str, Callable] = field(default_factory=dict)
    # other tasks (score, extract): name -> TaskHead
    task_heads: dict[str, TaskHead] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)
    param_bytes: int = 0
    # tokens per batch (the scheduler's budget): the card's, capped on CPU (see batch_budget)
    batch_tokens: int = 0
    # per inference thread: batches of one model may run side by side on CPU
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def last_padded_tokens(self) -> int:
        """Padding the attention backend added (CPU grouping) to the last batch this thread ran."""
        return getattr(self._local, "padded_tokens", 0)

    @torch.inference_mode()
    def run(self, task: str, items: Sequence[WorkItem]) -> list:
        limited = any(it.key_len is not None for it in items)
        batch = pack(
            [it.ids for it in items], self.backend, self.device,
            [it.type_ids for it in items] if items[0].type_ids is not None else None,
            key_lens=[it.key_len or it.num_tokens for it in items] if limited else None,
        )
        self._local.padded_tokens = batch.attn.padded_tokens  # for the scheduler's metrics
        hidden = self.backbone(batch.input_ids, batch.positions, batch.attn, batch.token_type_ids)
        if task != "encode":
            return self.task_heads[task](self, hidden, batch, items)
        wanted = set().union(*(it.outputs for it in items))
        per_output = {name: self.output_heads[name](hidden, batch) for name in wanted}
        return [{name: per_output[name][i] for name in it.outputs} for i, it in enumerate(items)]

    def modules(self) -> list[torch.nn.Module]:
        """The backbone and every head module, found through the head callables (bound
        methods, functools.partial arguments and closure cells), so builders need no
        extra bookkeeping."""
        found: dict[int, torch.nn.Module] = {id(self.backbone): self.backbone}
        for head in [*self.output_heads.values(), *self.task_heads.values()]:
            for obj in _referenced(head):
                if isinstance(obj, torch.nn.Module):
                    found.setdefault(id(obj), obj)
        return list(found.values())

    def _tensors(self):
        seen = set()
        for module in self.modules():
            for tensor in [*module.parameters(), *module.buffers()]:
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    yield tensor

    def release(self) -> None:
        """Free the weights now (eviction), without waiting for the garbage collector:
        a full gc pass costs about a second in a process that imported transformers."""
        empty = torch.empty(0, device=self.device)
        for tensor in self._tensors():
            tensor.data = empty

    def offload(self) -> None:
        """Move the weights to host memory (pinned, for fast copies back) for the host cache.
        On the CPU they already are in host memory: nothing moves."""
        if self.device.type != "cpu":
            for tensor in self._tensors():
                tensor.data = tensor.data.to("cpu").pin_memory()

    def restore(self) -> "ModelRunner":
        """Bring offloaded weights back to the device (swap-in from the host cache)."""
        if self.device.type != "cpu":
            for tensor in self._tensors():
                tensor.data = tensor.data.to(self.device, non_blocking=True)
            torch.cuda.synchronize(self.device)
        return self

    def dense_head(self) -> tuple[Callable, int]:
        """Pooling (card's mode), then sentence-transformers' Dense modules where the model
        has them, as a dense output head, and its dimension. Normalisation and Matryoshka
        truncation are per-request post-processing."""
        mode = self.card.pooling
        projection = pooled_dense_stack(self.root, self.device, self.dtype)

        def dense(hidden: torch.Tensor, batch: PackedBatch) -> np.ndarray:
            seq_index = batch.seq_index() if mode in NEEDS_SEQ_INDEX else None
            pooled = pool(mode, hidden, batch.cu_seqlens, seq_index)
            if projection is not None:
                pooled = projection(pooled.to(self.dtype))
            return pooled.float().cpu().numpy()

        dims = projection[-1].projection.out_features if projection is not None else self.config.hidden_size
        return dense, dims


def _referenced(fn) -> list:
    """Objects a head callable holds: its bound instance, partial arguments, closure cells."""
    import functools

    objs = [fn, getattr(fn, "__self__", None)]
    if isinstance(fn, functools.partial):
        objs += [*_referenced(fn.func), *fn.args, *fn.keywords.values()]
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            objs.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    return [o for o in objs if o is not None]


# Builders for heads beyond dense pooling register here: output or task name ->
# fn(runner, tensors, prefix) that installs the head on the runner (or raises
# ValueError when the checkpoint lacks what it needs).
HEAD_BUILDERS: dict[str, Callable[[ModelRunner, dict, str], None]] = {}


def build_runner(card: ModelCard, root: Path, device: torch.device,
                 tokenizer: TextTokenizer | None = None) -> ModelRunner:
    config = read_config(root)
    family = family_for(config, card.family)
    dtype = resolve_dtype(card.dtype, device)
    backend = select_backend(device, dtype)
    typed_config = family.config_from_hf(config)
    with torch.device("meta"):
        backbone = family.model_class(typed_config, backend)
    backbone = materialize(backbone, device, dtype).eval()
    tensors = dict(iter_tensors(root))
    report = load_checkpoint(backbone, tensors, backbone.weight_spec)
    if card.dtype == "int8":
        backbone = quantize_linear_int8(backbone)
    if tokenizer is None:
        tokenizer = TextTokenizer(root, max_length=min(card.max_seq_len, getattr(typed_config, "max_seq_len", card.max_seq_len)),
                                  trust_remote_code=card.trust_remote_code)
    runner = ModelRunner(
        card=card, root=root, family=family, config=typed_config, backbone=backbone, tokenizer=tokenizer,
        device=device, dtype=dtype, backend=backend,
        param_bytes=sum(p.numel() * p.element_size() for p in backbone.parameters()),
        batch_tokens=batch_budget(card, device, dtype),
    )
    for output in card.outputs:
        if output == "dense":
            runner.output_heads["dense"], runner.dims["dense"] = runner.dense_head()
        elif output in HEAD_BUILDERS:
            HEAD_BUILDERS[output](runner, tensors, report.prefix)
        else:
            raise UnsupportedArchitecture(f"{card.id}: output {output!r} has no head implementation yet")
    return runner


# Imported last: head modules import HEAD_BUILDERS, ModelRunner and WorkItem from this module.
from . import heads as _heads  # noqa: E402,F401  (importing the heads registers their builders)
from .heads.pooling import NEEDS_SEQ_INDEX, pool  # noqa: E402
from .heads.st_dense import pooled_dense_stack  # noqa: E402

__all__ = ["ModelRunner", "WorkItem", "build_runner", "resolve_dtype", "HEAD_BUILDERS", "WeightLoadError"]
