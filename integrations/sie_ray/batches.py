"""The batches Ray Data hands a callable class, read and extended as Arrow tables.

Ray passes a batch as a dict of numpy arrays (its default `batch_format`), a pandas
DataFrame or a pyarrow Table, and takes any of the three back. These classes always answer a
Table: Arrow is where the typed vector columns live (`columns.py`), and Ray stores a Table
block as it is. `batch_format="pyarrow"` skips the one conversion this module makes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa


def as_table(batch: Any) -> pa.Table:
    """A Ray batch (Table, DataFrame or dict of numpy arrays) as a pyarrow Table."""
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, Mapping):
        return pa.table({name: _numpy_column(np.asarray(values)) for name, values in batch.items()})
    # pandas, imported by Ray whenever it hands one over
    return pa.Table.from_pandas(batch, preserve_index=False)


def _numpy_column(values: np.ndarray) -> pa.Array:
    # a 2-D numeric column (an earlier stage's vectors in numpy format) becomes fixed-size lists
    if values.ndim == 2 and values.dtype != object:
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])
    if values.ndim == 1 and values.dtype == object:
        return pa.array([v.tolist() if isinstance(v, np.ndarray) else v for v in values])
    return pa.array(values)


def texts(table: pa.Table, column: str, role: str = "text") -> list[str]:
    """The strings of `column`; a missing column, a null or a non-string is a ValueError naming
    the column (and the row), raised before any request is sent."""
    if column not in table.column_names:
        raise ValueError(f"the {role} column {column!r} is not in the batch (columns: {table.column_names})")
    values = table.column(column).to_pylist()
    for row, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"the {role} column {column!r} holds {type(value).__name__} at batch row {row}; "
                             f"every row needs a string (filter nulls out first, e.g. ds.filter(expr=...))")
    return values


def with_columns(table: pa.Table, columns: Mapping[str, pa.Array]) -> pa.Table:
    """`table` plus `columns` (a column of the same name is replaced: re-running a stage overwrites)."""
    for name, array in columns.items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, array)
        else:
            table = table.append_column(name, array)
    return table
