"""What the three callable classes share: the client opened once per actor, and a batch
turned into a Table, given new columns, and handed back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from .backend import open_client
from .batches import as_table, texts, with_columns


class SIEStage:
    """Base of `SIEEncoder`, `SIEScorer` and `SIEExtractor`: a Ray Data callable class over the
    `column` of each batch. Ray builds one per actor (`map_batches(Cls, fn_constructor_kwargs=
    {...}, concurrency=N)`), so the constructor's work (the client, the Engine and its model)
    is done once per actor.

    model: the model id (as in `GET /v1/models`).
    column: the text column read.
    url: an SIE server or router (`http://host:port`); None runs an Engine inside the actor.
    device, local_models, model_dirs: the in-process Engine's (`sie_client.embedded.shared_engine`).
    client_options: `SIEClient` options (api_key, timeout, batch_size, max_concurrency, max_retries...).
    """

    def __init__(self, model: str, column: str = "text", *, url: str | None = None, device: str = "auto",
                 local_models: Mapping[str, str] | None = None, model_dirs: Sequence[str] = (),
                 client_options: Mapping[str, Any] | None = None):
        if not isinstance(column, str) or not column:
            raise ValueError("column must name the batch's text column, e.g. column='text'")
        self.model = model
        self.column = column
        self.client = open_client(model, url, device=device, local_models=local_models, model_dirs=model_dirs,
                                  client_options=client_options)

    def __call__(self, batch: Any) -> pa.Table:
        table = as_table(batch)
        if table.num_rows == 0:
            return table
        return with_columns(table, self.columns(table, texts(table, self.column)))

    def columns(self, table: pa.Table, items: list[str]) -> dict[str, pa.Array]:
        """The new columns for a batch whose `column` holds `items` (one value per row)."""
        raise NotImplementedError
