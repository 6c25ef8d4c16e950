"""`SIEEncoder`: dense, sparse and multi-vector embeddings of a text column."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from .columns import dense_column, multivector_column, sparse_columns
from .stage import SIEStage

OUTPUT_TYPES = ("dense", "sparse", "multivector")
# each output type's Arrow columns, keyed by the suffix added to the column's name
PARTS: dict[str, Callable[[Sequence[Any]], dict[str, pa.Array]]] = {
    "dense": dense_column, "sparse": sparse_columns, "multivector": multivector_column,
}


class SIEEncoder(SIEStage):
    """Embeds `column` with `model`; per output type one column (sparse: two), named by
    `output_columns` (default: the type's name):

    - dense: `FixedSizeList<float32>[dims]` (`<name>_scale` beside it for output_dtype="int8")
    - sparse: `<name>_indices` (list<int32>) and `<name>_values` (list<float32>)
    - multivector: `list<FixedSizeList<float32>[dims]>`, one vector per kept token

    Example:
        ds = ray.data.read_parquet("docs/").map_batches(
            SIEEncoder, fn_constructor_kwargs={"model": "BAAI/bge-small-en-v1.5", "column": "text"},
            concurrency=4, num_gpus=1, batch_size=512, batch_format="pyarrow")

    encode_options: the rest of `SIEClient.encode`'s fields (is_query, instruction, dims,
    normalize, output_dtype, truncate, precision...). Other arguments: see `SIEStage`.
    """

    def __init__(self, model: str, column: str = "text", *, output_types: Sequence[str] = ("dense",),
                 output_columns: Mapping[str, str] | None = None, encode_options: Mapping[str, Any] | None = None,
                 **stage_options: Any):
        output_types = [output_types] if isinstance(output_types, str) else list(output_types)
        unknown = [t for t in output_types if t not in OUTPUT_TYPES]
        if unknown or not output_types:
            raise ValueError(f"output_types must be a non-empty subset of {OUTPUT_TYPES}, got {output_types}")
        names = {t: t for t in OUTPUT_TYPES} | dict(output_columns or {})
        self.output_types = output_types
        self.names = {t: names[t] for t in output_types}
        self.encode_options = dict(encode_options or {})
        super().__init__(model, column, **stage_options)

    def columns(self, table: pa.Table, items: list[str]) -> dict[str, pa.Array]:
        result = self.client.encode(self.model, items, output_types=self.output_types, **self.encode_options)
        columns: dict[str, pa.Array] = {}
        for output_type, name in self.names.items():
            values = [getattr(item, output_type) for item in result.items]
            if any(v is None for v in values):
                raise ValueError(f"model {self.model!r} returned no {output_type} output (GET /v1/models/"
                                 f"{self.model} lists its outputs)")
            columns.update({name + suffix: array for suffix, array in PARTS[output_type](values).items()})
        return columns
