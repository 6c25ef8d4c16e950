"""SIE embedding functions for LanceDB's registry.

A table whose schema names one of these functions (through a `LanceModel` with
`func.SourceField()` / `func.VectorField()`) embeds its source column on `add`
(SIE's document mode) and embeds query strings on `search` (SIE's query mode).
The function's settings are stored in the table's schema metadata, so reopening
the table recreates it; `ndims()` asks SIE's `/v1/models` for the vector size.

Failures raise the client's `SIEError` at once: LanceDB's own retry loop (every
exception, exponential backoff from 2 s, 7 times) is off, because SIE's client
already retries what can succeed later (429, 503, lost connections) within a
bounded wait, and a 400, 401 or 404 will not change by waiting. Where LanceDB's
Python code calls the function (`search`, its retry loop when `max_retries` turns
it on) the `SIEError` itself comes out; `table.add` embeds inside LanceDB's Rust
writer, which can only pass on the error's text (a `RuntimeError` whose message
is SIE's "<status> <code>: <message>"); `compute_source_embeddings(texts)` before `add`
raises the `SIEError` itself, and LanceDB embeds no row whose vector is given. Rows whose text
is empty or None get no vector (None), as LanceDB's built-in functions do; the
table's `on_bad_vectors` policy decides what becomes of them.

    func = get_registry().get("sie").create(model="sentence-transformers/all-MiniLM-L6-v2")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec
import numpy as np
from lancedb.embeddings import TextEmbeddingFunction, register
from lancedb.embeddings.utils import retry_with_exponential_backoff
from pydantic import PrivateAttr

from sie_client import DEFAULT_MODEL, SIEClient, SIEError, connect
from sie_contract.shapes import Muvera


@register("sie")
class SIEEmbeddings(TextEmbeddingFunction):
    """Dense vectors from an SIE model.

    Fields: model; url (None: `SIE_URL`, else embedded mode); api_key (LanceDB treats it
    as sensitive: pass "$var:name" after `registry.set_var(name, key)`, or rely on
    `SIE_API_KEY`); timeout; instruction (query instruction override); dims (Matryoshka
    truncation); batch_size; model_dirs (embedded mode: extra card directories);
    progress (a progress bar over each bulk embedding, such as `table.add` of many rows).
    """

    model: str = DEFAULT_MODEL
    url: str | None = None
    api_key: str | None = None
    timeout: float | None = None
    instruction: str | None = None
    dims: int | None = None
    batch_size: int | None = None
    # Embedded mode only: extra model-card directories to serve (see sie_client.embedded).
    model_dirs: list[str] | None = None
    progress: bool | None = None
    # LanceDB's retry loop, off by default (see the module docstring); a positive
    # value turns it back on around SIE's own retries.
    max_retries: int = 0

    _client: SIEClient | None = PrivateAttr(default=None)
    # None until the first call measures the model's width (LanceDB's base declares it int)
    _ndims: int | None = PrivateAttr(default=None)  # type: ignore[assignment]

    # The kind of SIE output this function stores (a class constant, not a setting).
    output: ClassVar[str] = "dense"

    @staticmethod
    def sensitive_keys() -> list[str]:
        return ["api_key"]

    @property
    def client(self) -> SIEClient:
        if self._client is None:
            self._client = connect(url=self.url, api_key=self.api_key, timeout=self.timeout,
                                   model_dirs=tuple(self.model_dirs or ()))
        return self._client

    def ndims(self) -> int:
        if self._ndims is None:
            if self.output == "dense" and self.dims:
                self._ndims = int(self.dims)
            else:
                size = self.client.model(self.model).dims.get(self.output)
                if not size:  # sizes of some outputs are known only once the model is loaded
                    probe = self.client.encode(self.model, ["dimension probe"], output_types=[self.output]).items[0]
                    size = np.shape(getattr(probe, self.output))[-1]
                self._ndims = int(size)
        return self._ndims

    def _with_retry(self, compute, *args, **kwargs) -> list:
        """`compute(*args, **kwargs)`, through LanceDB's retry loop only when `max_retries` asks for it.

        Not through LanceDB's wrapper with 0 retries: it turns the first error into a plain
        Exception("Maximum number of retries (0) exceeded.", error). When the loop does give up,
        the last SIEError is raised again, chained to LanceDB's exception, so callers see SIE's
        status and code whichever way the function was called."""
        if self.max_retries <= 0:
            return compute(*args, **kwargs)
        try:
            return retry_with_exponential_backoff(compute, max_retries=self.max_retries)(*args, **kwargs)
        except Exception as exc:
            last = exc.args[-1] if exc.args else None
            if isinstance(last, SIEError) and last is not exc:
                raise last from exc
            raise

    def compute_source_embeddings_with_retry(self, *args, **kwargs) -> list:
        return self._with_retry(self.compute_source_embeddings, *args, **kwargs)

    def compute_query_embeddings_with_retry(self, *args, **kwargs) -> list:
        return self._with_retry(self.compute_query_embeddings, *args, **kwargs)

    def _encode(self, texts: Sequence[str | None] | np.ndarray, is_query: bool) -> list:
        """One vector per text; None where the text is not a non-blank string."""
        return self._encode_items([text if isinstance(text, str) and text.strip() else None for text in texts],
                                  is_query)

    def _encode_items(self, items: list[Any], is_query: bool) -> list:
        """One vector per encode item (a text or an `{"image": ...}` dict); None where the item is None."""
        valid = [i for i, item in enumerate(items) if item is not None]
        out: list = [None] * len(items)
        if not valid:
            return out
        result = self.client.encode(
            self.model, [items[i] for i in valid], output_types=[self.output], is_query=is_query,
            instruction=self.instruction if is_query else None, dims=self.dims if self.output == "dense" else None,
            batch_size=self.batch_size, progress=self.progress, **self._encode_options(),
        )
        for i, item in zip(valid, result.items):
            out[i] = self._row(np.asarray(getattr(item, self.output), dtype=np.float32))
        return out

    def _encode_options(self) -> dict[str, Any]:
        """Encode fields of this function's output beyond the common ones."""
        return {}

    @staticmethod
    def _row(vector: np.ndarray) -> Any:
        """One stored value: the `[ndims]` vector itself."""
        return vector

    def generate_embeddings(self, texts: list[str] | np.ndarray, *args, **kwargs) -> list:
        """Document-mode vectors, one per text (`[ndims]` float32 each; None for empty or None texts)."""
        return self._encode(texts, is_query=False)

    def compute_query_embeddings(self, query: str, *args, **kwargs) -> list:
        """Query-mode vector(s) for a search string."""
        return self._encode(self.sanitize_input(query), is_query=True)


class _TokenRows(list):
    """One text's token vectors, `[tokens]` rows of `[ndims]` float32, whose `len()` is `ndims`.

    lancedb 0.40's `table.add` (`_append_vector_columns`) keeps an auto-computed value only when
    `len(value) == func.ndims()` and stores NULL otherwise, assuming one flat vector per row, so a
    multivector value (len = its token count) was silently dropped. pyarrow reads a list's items
    through the C-level size, not `__len__`, so this value still converts to all its rows. Only
    the values handed to LanceDB's writer are wrapped; `generate_embeddings` returns plain lists.
    tests/integrations/test_integration_lancedb.py stores and reads back the vectors through
    `add`, so a lancedb release that checks differently fails there, not silently."""

    def __init__(self, rows: list, ndims: int):
        super().__init__(rows)
        self.ndims = ndims

    def __len__(self) -> int:
        return self.ndims


@register("sie-multivector")
class SIEMultiVectorEmbeddings(SIEEmbeddings):
    """Late-interaction token vectors for a LanceDB multivector column
    (`MultiVector(func.ndims())`, cosine metric), searched by MaxSim.

    `table.add` of rows with text only embeds and stores the token vectors, as for "sie";
    `generate_embeddings(texts)` gives, per text, a list of `[ndims]` float32 rows (what a
    MultiVector column takes: `table.add([{"text": t, "vector": v} ...])` works as is), and
    `table.search("query text")` embeds the query through this function (query mode).
    """

    model: str = "answerdotai/answerai-colbert-small-v1"
    output: ClassVar[str] = "multivector"

    @staticmethod
    def _row(vector: np.ndarray) -> Any:
        """One stored value: `[tokens]` rows of `[ndims]` (pyarrow cannot convert a 2-D array into a list column)."""
        return list(vector)

    def compute_source_embeddings_with_retry(self, *args, **kwargs) -> list:
        ndims = self.ndims()
        return [None if rows is None else _TokenRows(rows, ndims)
                for rows in super().compute_source_embeddings_with_retry(*args, **kwargs)]


@register("sie-muvera")
class SIEMuveraEmbeddings(SIEEmbeddings):
    """One vector per text from a multi-vector model (ColBERT, ColPali): the MUVERA encoding of
    its token vectors (SIE's `muvera` output, FastEmbed's algorithm and parameters), for a plain
    `Vector(func.ndims())` column. MUVERA's inner product approximates MaxSim: search with
    `.metric("dot")`, and rescore the candidates with the token vectors where precision matters.
    Fields beyond "sie"'s: k_sim, dim_proj, r_reps, random_seed (FastEmbed's defaults: 5, 16,
    20, 42, which give 10,240 dimensions)."""

    model: str = "answerdotai/answerai-colbert-small-v1"
    k_sim: int = 5
    dim_proj: int = 16
    r_reps: int = 20
    random_seed: int = 42
    output: ClassVar[str] = "muvera"

    def _parameters(self) -> Muvera:
        # convert (not the constructor) checks the bounds: msgspec.ValidationError, a ValueError
        return msgspec.convert({"k_sim": self.k_sim, "dim_proj": self.dim_proj, "r_reps": self.r_reps,
                                "random_seed": self.random_seed}, Muvera)

    def ndims(self) -> int:
        return self._parameters().dims

    def _encode_options(self) -> dict[str, Any]:
        options = self._parameters()
        return {"muvera": {name: getattr(options, name) for name in options.__struct_fields__}}
