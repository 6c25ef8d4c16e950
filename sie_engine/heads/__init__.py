"""Heads: shared modules from backbone hidden states `[T, H]` (plus the packed
batch's `cu_seqlens`) to per-sequence outputs. Backbones never pool."""

# Each head module registers its builder in runner.HEAD_BUILDERS on import; add new ones here.
from . import classifier, colbert, sparse  # noqa: E402,F401
from . import gliner  # noqa: E402,F401  (extract)
