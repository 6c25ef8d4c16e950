"""Per-request output options applied to pooled vectors: Matryoshka truncation,
L2 normalisation and the output dtype (float32, float16, int8 with its scale, uint8,
binary packed bits).

What each option means (dense vectors; multivector matrices take `output_dtype` too):

- `dims`: keep the first `dims` components (Matryoshka truncation), then L2-normalise
  when the request or card normalises, so truncated vectors are unit length again.
- `output_dtype`:
  - `float32` (default) and `float16`: the values, cast.
  - `int8`: symmetric per-output quantisation. `scale = max(|x|) / 127` (1.0 for an all-zero
    output) and `data = round(x / scale)` in [-127, 127]; dequantise with `data * scale`
    (`Quantized.dequantize()`); each component is then within `scale / 2` of the float.
    A multivector matrix has one scale for the whole matrix.
  - `uint8`: sentence-transformers' `quantize_embeddings(x, precision="uint8", ranges=...)`
    (the formula Infinity serves) with each vector's own range: `start = min(x)`, `step =
    (max(x) - start) / 255` (1 when the vector is constant), `data = clip(floor((x - start) /
    step), 0, 255)`. Upstream SIE's `uint8` maps each vector's own [min, max] onto [0, 255]
    too (it rounds where sentence-transformers floors: at most 1 apart). A range per vector,
    not per dimension over a calibration set (Infinity's): a vector's bytes never depend on
    the batch or a dataset. A multivector matrix gets one range per token vector. The
    answer is the plain uint8 values (Qdrant's and LanceDB's uint8 vectors); the range is not
    sent, so it does not dequantise (use int8 for that).
  - `binary`: the sign bits (`x > 0`) packed 8 per byte along the last axis, numpy
    `packbits` order (first component in the most significant bit), `ceil(dims / 8)`
    bytes; the same as sentence-transformers' `ubinary` precision. `unpack_binary`
    undoes the packing into {0, 1}; Hamming distance on the bytes ranks like the signs.
- Sparse outputs are always indices (int32) and values (float32): `output_dtype` and
  `dims` do not apply to them.
"""

from __future__ import annotations

import numpy as np

from sie_contract.builtin import OUTPUT_DTYPES
from sie_contract.values import Quantized

__all__ = ["OUTPUT_DTYPES", "Quantized", "convert_dtype", "to_uint8", "truncate_and_normalize", "unpack_binary"]


def unpack_binary(bits: np.ndarray, dims: int) -> np.ndarray:
    """`binary` output (`[..., ceil(dims / 8)]` uint8) -> `[..., dims]` uint8 of 0 / 1 sign bits."""
    return np.unpackbits(bits, axis=-1, count=dims)


def to_uint8(vectors: np.ndarray) -> np.ndarray:
    """`[..., dims]` float32 -> uint8, each vector (last axis) on its own range (see above);
    the same arithmetic as sentence-transformers' quantize_embeddings, in float32."""
    values = np.asarray(vectors, dtype=np.float32)
    if values.size == 0:
        return np.zeros(values.shape, dtype=np.uint8)
    starts = values.min(axis=-1, keepdims=True)
    steps = (values.max(axis=-1, keepdims=True) - starts) / np.float32(255)
    steps = np.where(steps == 0, np.float32(1), steps)
    return np.clip(np.floor((values - starts) / steps), 0, 255).astype(np.uint8)


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
    if output_dtype == "uint8":
        return to_uint8(vector)
    if output_dtype == "binary":
        return np.packbits(vector > 0, axis=-1)
    raise ValueError(f"unknown output_dtype {output_dtype!r}")
