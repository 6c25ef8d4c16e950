"""A GLiNER bi-encoder's labels encoder, with its label vectors cached.

A bi-encoder (knowledgator/gliner-bi-*, modern-gliner-bi-*) encodes each label string on its
own, with a second encoder (a sentence-transformers BERT such as bge-small-en-v1.5): the
label's tokens (with the tokenizer's [CLS] / [SEP]) through that encoder, mean-pooled over
the tokens, then `labels_projection` to GLiNER's width when the widths differ (gliner's
`BiEncoder.encode_labels`; it projects before pooling, which is the same affine map).

A label's vector depends on the label alone, so it is computed once and kept: a bounded LRU
keyed by the label string, holding float32 host vectors (D x 4 bytes each: 4096 labels of a
768-wide model are 12 MB). A batch encodes the labels none of its requests has seen, all in
one packed forward, so requests with different label sets share that pass. The forward is
SIE's own family for the labels encoder's config (BERT, or any family SIE has).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...batch import pack
from ...checkpoints.layout import CheckpointLayout
from ...heads.common import optional
from ...heads.pooling import mean_pool
from ...layers.weights import load_checkpoint
from ...tokenizer import TextTokenizer
from .. import family_for
from .checkpoint import LABELS_ENCODER_PREFIX, LABELS_PROJECTION_PREFIX, GlinerConfig, labels_tokenizer_source

# Distinct labels whose vectors are kept (least recently used dropped first).
CACHE_LABELS = 4096


class _Under(Mapping):
    """The tensors of a checkpoint whose names start with `prefix` (the labels encoder's only, so
    its weights are found under their own prefix, not the text encoder's)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor], prefix: str):
        self._tensors = tensors
        self._names = {name: None for name in tensors if name.startswith(prefix)}  # ordered, O(1) lookups

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._names:
            raise KeyError(name)
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class LabelCache:
    """label string -> its float32 vector `[D]`, least recently used dropped past `capacity`."""

    def __init__(self, capacity: int = CACHE_LABELS):
        self.capacity = capacity
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # the runner may run batches of one model on several threads

    def __len__(self) -> int:
        return len(self._vectors)

    def missing(self, labels: Sequence[str]) -> list[str]:
        """The distinct labels not cached, in first-seen order."""
        with self._lock:
            return [label for label in dict.fromkeys(labels) if label not in self._vectors]

    def put(self, labels: Sequence[str], vectors: np.ndarray) -> None:
        with self._lock:
            for label, vector in zip(labels, vectors):
                self._vectors[label] = vector
                self._vectors.move_to_end(label)
            while len(self._vectors) > self.capacity:
                self._vectors.popitem(last=False)

    def get(self, labels: Sequence[str], fresh: Mapping[str, np.ndarray]) -> np.ndarray:
        """`[C, D]` vectors of `labels`: from `fresh` (this batch's encodings) or the cache."""
        with self._lock:
            rows = []
            for label in labels:
                vector = fresh.get(label)
                if vector is None:
                    vector = self._vectors[label]
                    self._vectors.move_to_end(label)
                rows.append(vector)
            return np.stack(rows)


class LabelEncoder(nn.Module):
    """Label strings -> label vectors `[C, D]` (before the prompt MLP), cached per label."""

    def __init__(self, backbone: nn.Module, backend, tokenizer: TextTokenizer, projection: nn.Linear | None,
                 capacity: int = CACHE_LABELS):
        super().__init__()
        self.backbone = backbone
        self.projection = projection
        self.backend = backend
        self.tokenizer = tokenizer
        self.cache = LabelCache(capacity)

    @torch.inference_mode()
    def encode(self, labels: Sequence[str]) -> torch.Tensor:
        """Every label through the encoder in one packed batch -> `[n, D]` float32 (no cache)."""
        device = next(self.backbone.parameters()).device
        batch = pack(self.tokenizer.encode(labels).ids, self.backend, device)
        hidden = self.backbone(batch.input_ids, batch.positions, batch.attn, batch.token_type_ids)
        pooled = mean_pool(hidden, batch.cu_seqlens, batch.seq_index())  # float32
        return self.projection(pooled) if self.projection is not None else pooled

    def vectors(self, labels: Sequence[str], device: torch.device) -> torch.Tensor:
        """`[C, D]` float32 on `device`, encoding only the labels not cached yet."""
        missing = self.cache.missing(labels)
        fresh: dict[str, np.ndarray] = {}
        if missing:
            encoded = self.encode(missing).cpu().numpy()
            fresh = dict(zip(missing, encoded))
            self.cache.put(missing, encoded)
        return torch.from_numpy(self.cache.get(labels, fresh)).to(device)


def build_label_encoder(config: GlinerConfig, root: Path, tensors: Mapping[str, torch.Tensor], root_prefix: str,
                        width: int, device: torch.device, dtype: torch.dtype) -> LabelEncoder:
    """The labels encoder of a bi-encoder checkpoint: SIE's family for `labels_encoder_config`, its
    tensors under `token_rep_layer.labels_encoder.model.`, the projection to `width` if saved."""
    from ...runner import new_backbone  # the runner builds heads: imported when a bi-encoder loads

    hf_config = dict(config.labels_encoder_config or {})
    family = family_for(hf_config)
    backbone, backend = new_backbone(family, family.config_from_hf(hf_config), device, dtype)
    prefix = root_prefix + LABELS_ENCODER_PREFIX
    report = load_checkpoint(backbone, _Under(tensors, prefix), backbone.weight_spec)
    if not report.loaded:
        raise ValueError(f"GLiNER bi-encoder: no labels encoder tensors under {prefix!r}")
    weight = optional(tensors, root_prefix + LABELS_PROJECTION_PREFIX + "weight")
    projection = None
    if weight is not None:
        projection = nn.Linear(weight.shape[1], weight.shape[0])
        projection.weight.data.copy_(weight)
        projection.bias.data.copy_(tensors[root_prefix + LABELS_PROJECTION_PREFIX + "bias"])
    labels_width = projection.out_features if projection is not None else int(hf_config.get("hidden_size", 0))
    if labels_width != width:
        raise ValueError(f"GLiNER bi-encoder: label vectors are {labels_width} wide, the span head's {width}")
    source = labels_tokenizer_source(root, config)
    layout = CheckpointLayout(kind="gliner-labels", root=source, config=hf_config, tokenizer_source=source)
    window = int(hf_config.get("max_position_embeddings", 512))
    tokenizer = TextTokenizer(layout, min(window, 512))
    return LabelEncoder(backbone, backend, tokenizer, projection.to(device) if projection is not None else None)
