"""Results -> the answer's wire shape, for every task alike.

A result is a dataclass with `model`, `tokens`, optional `timings` and its payload
(`items`, `scores`, ...). Its answer is `{"model", <payload>, "usage": {"tokens"}}`,
with nested dataclasses as objects, fields that are None left out (an encode item
carries only the outputs asked for) and numpy arrays and `Quantized` values kept
as they are: the server's codec writes those as JSON lists or msgpack tensors,
the embedded transport hands them over directly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .values import Quantized

# Fields of a result that are not part of its payload.
_ENVELOPE = ("model", "tokens", "timings")


def to_wire(result: Any) -> dict[str, Any]:
    payload = {f.name: _value(getattr(result, f.name)) for f in dataclasses.fields(result) if f.name not in _ENVELOPE}
    return {"model": result.model, **payload, "usage": {"tokens": int(result.tokens)}}


def _value(value: Any) -> Any:
    if isinstance(value, (np.ndarray, Quantized)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _value(getattr(value, f.name)) for f in dataclasses.fields(value)
                if getattr(value, f.name) is not None}
    if isinstance(value, dict):
        return {str(k): _value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
