"""SIE's results as typed Arrow columns, so a Dataset stores what a vector database reads
without conversion: dense vectors as `FixedSizeList<float32>[dims]` (Lance and LanceDB index
exactly that type), sparse vectors as two list columns (indices, values), multi-vectors as a
list of fixed-size vectors per row, scores as float32, extractions as lists of structs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sie_client import Classification, Entity, Quantized, Relation, SparseVector

ENTITY = pa.struct([("text", pa.string()), ("label", pa.string()), ("score", pa.float32()),
                    ("start", pa.int32()), ("end", pa.int32())])
CLASSIFICATION = pa.struct([("label", pa.string()), ("score", pa.float32())])
RELATION = pa.struct([("head", ENTITY), ("relation", pa.string()), ("tail", ENTITY), ("score", pa.float32())])


def dense_column(vectors: Sequence[Any]) -> dict[str, pa.Array]:
    """`[N]` vectors of one size -> `{"": FixedSizeList[dims]}`; int8 vectors (`Quantized`) add
    `"_scale"`, the per-vector scale that turns them back into floats (`data * scale`)."""
    if vectors and isinstance(vectors[0], Quantized):
        columns = dense_column([v.data for v in vectors])
        columns["_scale"] = pa.array([v.scale for v in vectors], pa.float32())
        return columns
    matrix = np.stack([np.asarray(v) for v in vectors]) if vectors else np.zeros((0, 0), np.float32)  # [N, dims]
    values = pa.array(matrix.reshape(-1))
    return {"": pa.FixedSizeListArray.from_arrays(values, matrix.shape[1])}


def sparse_columns(vectors: Sequence[SparseVector]) -> dict[str, pa.Array]:
    """`{"_indices": list<int32>, "_values": list<float32>}`: the layout Qdrant's and LanceDB's
    sparse vectors take, one row per item."""
    return {
        "_indices": _ragged([v.indices for v in vectors], pa.int32()),
        "_values": _ragged([v.values for v in vectors], pa.float32()),
    }


def multivector_column(matrices: Sequence[np.ndarray]) -> dict[str, pa.Array]:
    """`[N]` matrices `[tokens_i, dims]` -> `list<FixedSizeList<float32>[dims]>`, one list per row."""
    dims = matrices[0].shape[1] if matrices else 0
    flat = np.concatenate([m.reshape(-1) for m in matrices]).astype(np.float32) if matrices else np.zeros(0, np.float32)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(flat), dims)  # [sum tokens_i] vectors
    offsets = pa.array(np.concatenate([[0], np.cumsum([len(m) for m in matrices])]).astype(np.int32))
    return {"": pa.ListArray.from_arrays(offsets, vectors)}


def _ragged(arrays: Sequence[np.ndarray], kind: pa.DataType) -> pa.Array:
    dtype = kind.to_pandas_dtype()
    flat = np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)
    offsets = pa.array(np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(flat, kind))


def _entity(entity: Entity) -> dict[str, Any]:
    return {"text": entity.text, "label": entity.label, "score": entity.score, "start": entity.start,
            "end": entity.end}


def entities_column(rows: Sequence[Sequence[Entity]]) -> pa.Array:
    return pa.array([[_entity(e) for e in row] for row in rows], pa.list_(ENTITY))


def classifications_column(rows: Sequence[Sequence[Classification] | None]) -> pa.Array:
    return pa.array([[{"label": c.label, "score": c.score} for c in row or ()] for row in rows],
                    pa.list_(CLASSIFICATION))


def relations_column(rows: Sequence[Sequence[Relation] | None]) -> pa.Array:
    return pa.array([[{"head": _entity(r.head), "relation": r.relation, "tail": _entity(r.tail), "score": r.score}
                      for r in row or ()] for row in rows], pa.list_(RELATION))
