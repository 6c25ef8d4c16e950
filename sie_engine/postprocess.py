"""Per-request output options applied to pooled vectors: Matryoshka truncation,
L2 normalisation and the output dtype (float32, float16, int8 with its scale,
binary packed bits)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OUTPUT_DTYPES = ("float32", "float16", "int8", "binary")


@dataclass
class Quantized:
    """An int8 vector and the scale that turns it back into floats (value = data * scale)."""

    data: np.ndarray
    scale: float


def truncate_and_normalize(vectors: np.ndarray, dims: int | None, normalize: bool) -> np.ndarray:
    """`[N, D]` float32 -> `[N, dims]` float32, normalised after truncation (Matryoshka)."""
    if dims is not None:
        vectors = vectors[:, :dims]
    if normalize:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.maximum(norms, 1e-12)
    return np.ascontiguousarray(vectors, dtype=np.float32)


def convert_dtype(vector: np.ndarray, output_dtype: str):
    """One vector (or matrix) in the requested output dtype."""
    if output_dtype == "float32":
        return vector
    if output_dtype == "float16":
        return vector.astype(np.float16)
    if output_dtype == "int8":
        peak = float(np.abs(vector).max()) if vector.size else 0.0
        scale = peak / 127.0 if peak > 0 else 1.0
        return Quantized(np.clip(np.rint(vector / scale), -127, 127).astype(np.int8), scale)
    if output_dtype == "binary":
        return np.packbits(vector > 0, axis=-1)
    raise ValueError(f"unknown output_dtype {output_dtype!r}")
