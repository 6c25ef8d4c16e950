"""Decoding a compat API's body (OpenAI, TEI, Cohere, Weaviate, Infinity) with bounded memory.

Those routes read a plain object and check its fields themselves. An untyped parser
(orjson, msgpack) builds whatever the bytes describe before any check: 16 MiB of msgpack
empty maps (one byte each) became 16 million dicts, +1.1 GB, and `/healthz` stalled while
they were freed (issue #30.3). Here the body is decoded by msgspec into a typed, bounded
shape, so the decoder itself refuses at the first element past a bound, before building it:

- depth: an object whose values nest at most `MAX_DEPTH` containers (every compat body is
  an object of scalars, lists of texts, lists of pairs or of small objects, or a config object);
- keys: at most `MAX_KEYS` per object;
- elements: at most `max_list` per list (the route passes the deployment's items bound, or
  `MAX_LIST` at least: a Weaviate vector of 16,384 floats).

So no list or object grows past its bound, and a JSON body's values are counted before any
of this (server/json_elements.py). Values: null, bool, int, float, str
(msgpack bin is not among them: no compat API takes bytes).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Any, Union

import msgspec
from msgspec import Meta

from sie_engine.errors import InvalidRequest, PayloadTooLarge

# Containers below the body's top-level object (OpenAI's `input: [[...]]` needs 2; TEI's
# `inputs: {"sentences": [...]}` 2; Cohere's rerank `documents: [{"text": ...}]` 2; Cohere's
# embed v2 `inputs: [{"content": [{"type": "image_url", "image_url": {"url": ...}}]}]` 5).
MAX_DEPTH = 5
MAX_KEYS = 64
MAX_LIST = 1 << 14

_SCALARS = (type(None), bool, int, float, str)
_BOUND = re.compile(r"Expected `(?P<kind>array|object)` of length <= (?P<n>\d+)")
_WHERE = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_GOT = re.compile(r"got `(?P<got>[^`]+)`")


def _level(inner: Any, max_list: int) -> Any:
    options = (*_SCALARS, Annotated[list[inner], Meta(max_length=max_list)],
               Annotated[dict[str, inner], Meta(max_length=MAX_KEYS)])
    return Union[options]  # noqa: UP007


@lru_cache(maxsize=8)
def body_type(max_list: int) -> Any:
    """The bounded shape: an object of values nested at most MAX_DEPTH containers deep."""
    value: Any = Union[_SCALARS]  # noqa: UP007
    for _ in range(MAX_DEPTH):
        value = _level(value, max_list)
    return Annotated[dict[str, value], Meta(max_length=MAX_KEYS)]


@lru_cache(maxsize=8)
def _decoders(max_list: int) -> tuple[msgspec.json.Decoder[Any], msgspec.msgpack.Decoder[Any]]:
    shape = body_type(max_list)
    return msgspec.json.Decoder(shape), msgspec.msgpack.Decoder(shape)


def decode_object(raw: bytes, is_msgpack: bool, max_list: int = MAX_LIST) -> dict:
    """Bytes -> the body's object (plain dicts, lists and scalars, as a JSON parser makes them).
    Raises msgspec.DecodeError for bytes that are not JSON / msgpack (the caller words it),
    InvalidRequest for a body that is not an object or nests too deeply, PayloadTooLarge
    for a list or object past its bound, each naming where."""
    json_decoder, msgpack_decoder = _decoders(max(max_list, 1))
    try:
        body: dict = (msgpack_decoder if is_msgpack else json_decoder).decode(raw)
    except msgspec.ValidationError as exc:
        raise _refusal(str(exc), max_list) from None
    return body


def _refusal(message: str, max_list: int) -> InvalidRequest:
    where = _WHERE.search(message)
    path = where.group("path") if where else ""
    field = _field(path)
    named = field if "[...]" not in path else None
    bound = _BOUND.search(message)
    if bound:
        what = "list" if bound.group("kind") == "array" else "object"
        unit = "elements" if what == "list" else "fields"
        return PayloadTooLarge(f"{field or 'the body'}: a {what} of more than {bound.group('n')} {unit}; "
                               "split the request", field=named)
    got = _GOT.search(message)
    if not path:
        return InvalidRequest(f"the body must be an object, got {got.group('got') if got else 'something else'}")
    if got and got.group("got") in ("array", "object") and path.count("[") + path.count(".") > MAX_DEPTH:
        return InvalidRequest(f"{field} is nested too deeply: this API takes at most {MAX_DEPTH} levels of "
                              "lists and objects inside the body", field=named)
    if got:
        return InvalidRequest(f"{field} must be null, a boolean, a number, a string, a list or an object, "
                              f"got {got.group('got')}", field=named)
    return InvalidRequest(f"{field}: {message}", field=named)


def _field(path: str) -> str:
    """msgspec's path -> the words for it: `input[3]`; `$[...][3]` where msgspec does not name
    a key (the body's values are a dict to it)."""
    if "[...]" in path:
        return f"the value at ${path}"
    return path[1:] if path.startswith(".") else path
