"""The fields Jina's embeddings API adds to OpenAI's (`POST /v1/embeddings`), so that a request
written for Jina's API (the body Jina's examples and its clients' code send to
api.jina.ai/v1/embeddings) is served as it is, pointed at SIE:

- `task`: the model's profile of that name (jina-embeddings-v3's task adapters);
- `embedding_type` (and its older name `encoding_type`): `float` or `base64`, as OpenAI's
  `encoding_format`; Jina's packed `binary` / `ubinary` are refused (`/v1/encode` answers
  `output_dtype: binary`);
- `normalized`: false answers the vectors as pooled (Jina's default is true);
- `late_chunking`: true reads the inputs as one sequence and pools each input's own tokens there
  (encode's `late_chunking`, sie_engine/tasks/late_chunking.py), so each vector has seen the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sie_engine.errors import InvalidRequest

FIELDS = ("task", "embedding_type", "encoding_type", "normalized", "late_chunking")
FORMATS = ("float", "base64")


@dataclass(frozen=True)
class JinaOptions:
    task: str | None = None  # a profile's name
    encoding_format: str | None = None  # float | base64, where the body names one
    normalize: bool | None = None  # None: the model's own
    late_chunking: bool = False


def jina_options(body: dict[str, Any], encoding_format: str | None) -> JinaOptions:
    """Jina's fields of `body`, checked; `encoding_format`: OpenAI's, which must agree with Jina's."""
    task = body.get("task")
    if task is not None and not isinstance(task, str):
        raise InvalidRequest("task must be a string: one of the model's profiles (GET /v1/models/{model} lists them)",
                             field="task")
    chosen = encoding_format
    for name in ("embedding_type", "encoding_type"):
        value = body.get(name)
        if value is None:
            continue
        if value not in FORMATS:
            raise InvalidRequest(f"{name} must be one of {', '.join(FORMATS)} here (packed binary vectors: "
                                 "POST /v1/encode with output_dtype binary)", field=name)
        if chosen is not None and chosen != value:
            raise InvalidRequest(f"{name} {value!r} disagrees with the request's other encoding ({chosen!r})",
                                 field=name)
        chosen = value
    normalized = body.get("normalized")
    if normalized is not None and not isinstance(normalized, bool):
        raise InvalidRequest("normalized must be true or false", field="normalized")
    late = body.get("late_chunking")
    if late is not None and not isinstance(late, bool):
        raise InvalidRequest("late_chunking must be true or false", field="late_chunking")
    return JinaOptions(task, chosen, None if normalized is None or normalized else False, bool(late))
