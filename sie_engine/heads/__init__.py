"""Heads: shared modules from backbone hidden states `[T, H]` (plus the packed
batch's `cu_seqlens`) to per-sequence outputs. Backbones never pool."""
