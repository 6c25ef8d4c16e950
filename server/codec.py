"""Wire formats: JSON (default) and msgpack, both ways.

Requests are msgpack when their Content-Type says so, JSON otherwise. Answers
are msgpack when the request's Accept asks for it (or, without an Accept that
names a type, when the request itself was msgpack). In msgpack every vector is
a tensor object `{"dtype", "shape", "data": <little-endian C-order bytes>}`; in
JSON it is a plain list, written by orjson straight from the numpy array (the
shortest text that reads back to the same float32). Bodies larger than
`offload_bytes` are parsed and written on a worker thread.

A task's body is decoded straight into its request struct (`read_request`: msgspec,
JSON or msgpack), which refuses an unknown field, a wrong type or a value out of bounds
at the first wrong element, naming its path. A body that is not JSON / msgpack at all is
reported as today's parsers word it (the struct decoder stops at the first wrong byte or
element; the full parse runs only then, to say why, and only for a body of at most
`EXPLAIN_BYTES`: a larger one is checked by msgspec skipping over it, which builds nothing).
A compat API's object (`read_object`) is decoded into bounded_body's bounded shape, never by
an untyped parser: both paths stop at the first element past a bound (issue #30.3).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import msgspec
import numpy as np
import orjson
from aiohttp import web

from sie_contract import FieldError, Task
from sie_contract.answers import to_wire
from sie_contract.values import Quantized
from sie_engine.errors import InvalidRequest, PayloadTooLarge

from .body import read_body
from .bounded_body import MAX_LIST, decode_object
from .json_elements import check_values

JSON = "application/json"
MSGPACK = "application/msgpack"
_MSGPACK_TYPES = frozenset({"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"})
# The largest body an untyped parser (orjson, msgpack) may build to word why a body is malformed:
# it builds up to ~64 bytes of objects per byte (an empty msgpack map is one byte, a dict 64), so
# 256 KiB costs at most ~16 MiB. A larger body is only skipped over (`_check_syntax`).
EXPLAIN_BYTES = 256 * 2**10


# ---- negotiation -----------------------------------------------------------
def request_is_msgpack(request: web.BaseRequest) -> bool:
    return request.content_type in _MSGPACK_TYPES


def answer_format(request: web.BaseRequest) -> str:
    """`MSGPACK` or `JSON` for this request's answer."""
    accept = request.headers.get("Accept", "").lower()
    if any(t in accept for t in _MSGPACK_TYPES):
        return MSGPACK
    if "json" in accept:
        return JSON
    return MSGPACK if request_is_msgpack(request) else JSON


# ---- reading ---------------------------------------------------------------
def _decode(raw: bytes, is_msgpack: bool) -> Any:
    if is_msgpack:
        try:
            return msgpack.unpackb(raw, raw=False)
        except msgpack.StackError:
            raise InvalidRequest("the msgpack body is nested too deeply") from None
        except Exception as exc:  # msgpack raises several unrelated types for bad input
            raise InvalidRequest(f"the body is not valid msgpack: {type(exc).__name__}: {exc}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc} (UTF-8 JSON; NaN and Infinity are not JSON, "
                             f"and nesting is limited)") from None


async def _read_raw(request: web.Request, max_bytes: int, idle_timeout_s: float, total_timeout_s: float) -> bytes:
    if request.content_length is not None and request.content_length > max_bytes:
        raise PayloadTooLarge(f"the body has {request.content_length} bytes; at most {max_bytes} per request "
                              f"(split the items over several requests)")
    raw = await read_body(request, max_bytes, idle_timeout_s, total_timeout_s)
    if not raw:
        raise InvalidRequest("the request body is empty: send a JSON (or msgpack) object")
    return raw


def _check_syntax(raw: bytes, is_msgpack: bool) -> None:
    """InvalidRequest saying why `raw` is not JSON / msgpack, if it is not; nothing else. Small
    bodies go through today's parsers (their words: depth, NaN, UTF-8, truncation ...); larger
    ones are skipped over by msgspec (`Raw`: syntax and depth checked, no object built)."""
    if len(raw) <= EXPLAIN_BYTES:
        _decode(raw, is_msgpack)
        return
    kind = "msgpack" if is_msgpack else "JSON"
    try:
        (msgspec.msgpack.decode if is_msgpack else msgspec.json.decode)(raw, type=msgspec.Raw)
    except RecursionError:
        raise InvalidRequest(f"the {kind} body is nested too deeply (depth limit)") from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"the body is not valid {kind}: {exc}") from None


def _decode_request(task: Task, raw: bytes, is_msgpack: bool) -> msgspec.Struct:
    """Bytes -> the task's request struct; InvalidRequest naming the field (or why the body
    is not JSON / msgpack: a malformed body is reported as such before any field)."""
    if not is_msgpack:
        check_values(raw)  # msgspec bounds a JSON list only once it is built
    try:
        return task.decode(raw, is_msgpack)
    except RecursionError:
        raise InvalidRequest(f"the {'msgpack' if is_msgpack else 'JSON'} body is nested too deeply "
                             "(depth limit)") from None
    except msgspec.DecodeError as exc:
        _check_syntax(raw, is_msgpack)
        raise InvalidRequest(f"the body is not valid {'msgpack' if is_msgpack else 'JSON'}: {exc}") from None
    except FieldError as exc:
        _check_syntax(raw, is_msgpack)  # the struct decoder stopped early: a malformed rest is the first error
        if exc.field is not None and exc.field == task.chunk_field and "is longer than" in str(exc):
            # past the wire's ceiling (shapes.MAX_WIRE_ITEMS): too large, as past the deployment's bound
            raise PayloadTooLarge(f"{exc}: split the {exc.field} over several requests", field=exc.field) from None
        raise InvalidRequest(str(exc), field=exc.field) from None


def _decode_object(raw: bytes, is_msgpack: bool, max_list: int) -> dict:
    """Bytes -> a compat API's body object, bounded (bounded_body); why a malformed one is not
    JSON / msgpack in today's words."""
    if not is_msgpack:
        check_values(raw)  # msgspec bounds a JSON list only once it is built
    try:
        return decode_object(raw, is_msgpack, max_list)
    except RecursionError:
        raise InvalidRequest(f"the {'msgpack' if is_msgpack else 'JSON'} body is nested too deeply "
                             "(depth limit)") from None
    except msgspec.DecodeError as exc:
        _check_syntax(raw, is_msgpack)
        raise InvalidRequest(f"the body is not valid {'msgpack' if is_msgpack else 'JSON'}: {exc}") from None
    except InvalidRequest:
        _check_syntax(raw, is_msgpack)  # a malformed rest is the first error, as for a task's body
        raise


async def read_request(request: web.Request, task: Task, max_bytes: int, offload_bytes: int, *,
                       idle_timeout_s: float = 30.0, total_timeout_s: float = 120.0) -> msgspec.Struct:
    """The body decoded into `task`'s request struct (bounds as `read_object`'s)."""
    raw = await _read_raw(request, max_bytes, idle_timeout_s, total_timeout_s)
    is_msgpack = request_is_msgpack(request)
    if len(raw) > offload_bytes:
        return await asyncio.get_running_loop().run_in_executor(None, _decode_request, task, raw, is_msgpack)
    return _decode_request(task, raw, is_msgpack)


async def read_object(request: web.Request, max_bytes: int, offload_bytes: int, *, idle_timeout_s: float = 30.0,
                      total_timeout_s: float = 120.0, max_list: int = MAX_LIST) -> dict:
    """The request body as a dict; 413 over `max_bytes` (decompressed) or for a list of more
    than `max_list` elements, 408 when it does not arrive in time, 400 for anything but an
    object or one nested deeper than a compat body is (body.py reads it, bounded_body decodes)."""
    raw = await _read_raw(request, max_bytes, idle_timeout_s, total_timeout_s)
    is_msgpack = request_is_msgpack(request)
    if len(raw) > offload_bytes:
        return await asyncio.get_running_loop().run_in_executor(None, _decode_object, raw, is_msgpack, max_list)
    return _decode_object(raw, is_msgpack, max_list)


async def read_object_or_list(request: web.Request, max_bytes: int, *, idle_timeout_s: float = 30.0,
                              total_timeout_s: float = 120.0) -> Any:
    """A small body that may be an object or a list (the admin API's cards): read within
    `max_bytes` (413 past it), decoded on a worker thread, 400 for what is not JSON / msgpack."""
    raw = await _read_raw(request, max_bytes, idle_timeout_s, total_timeout_s)
    return await asyncio.to_thread(_decode, raw, request_is_msgpack(request))


def check_fields(body: dict, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> None:
    """400 naming unknown fields (typos would otherwise be silently ignored) or missing ones."""
    unknown = [k for k in body if k not in allowed]
    if unknown:
        raise InvalidRequest(f"unknown field(s) {', '.join(map(str, unknown))}; allowed: {', '.join(allowed)}",
                             field=str(unknown[0]))
    for name in required:
        if body.get(name) is None:
            raise InvalidRequest(f"{name} is required", field=name)


# ---- writing ---------------------------------------------------------------
def tensor(array: np.ndarray) -> dict:
    """A msgpack tensor object: dtype, shape and little-endian C-order bytes."""
    array = np.ascontiguousarray(array)
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return {"dtype": array.dtype.name, "shape": list(array.shape), "data": little.tobytes()}


def task_answer(result: Any, fmt: str) -> tuple[dict, int]:
    """A task's answer in the format (arrays as msgpack tensors, or left for orjson to write),
    and the bytes of numbers it carries (to decide on offloading the serialisation)."""
    size = 0

    def leaves(value: Any) -> Any:
        nonlocal size
        if isinstance(value, dict):
            return {k: leaves(v) for k, v in value.items()}
        if isinstance(value, list):
            return [leaves(v) for v in value]
        if isinstance(value, Quantized):
            size += value.data.nbytes
            if fmt == MSGPACK:
                return {**tensor(value.data), "scale": float(value.scale)}
            return {"data": np.ascontiguousarray(value.data), "scale": float(value.scale)}
        if isinstance(value, np.ndarray):
            size += value.nbytes
            return tensor(value) if fmt == MSGPACK else np.ascontiguousarray(value)
        return value

    return leaves(to_wire(result)), size


def dumps(payload: Any, fmt: str) -> bytes:
    """Serialise on the calling thread (small payloads; `serialise` decides)."""
    if fmt == MSGPACK:
        return msgpack.packb(payload, use_bin_type=True)
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


async def serialise(payload: Any, fmt: str, approx_bytes: int, offload_bytes: int) -> bytes:
    if approx_bytes > offload_bytes:
        return await asyncio.get_running_loop().run_in_executor(None, dumps, payload, fmt)
    return dumps(payload, fmt)


def response(body: bytes, fmt: str, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=MSGPACK if fmt == MSGPACK else JSON)


async def answer(request: web.Request, payload: Any, *, approx_bytes: int = 0, offload_bytes: int = 256 * 2**10,
                 status: int = 200) -> web.Response:
    fmt = answer_format(request)
    return response(await serialise(payload, fmt, approx_bytes, offload_bytes), fmt, status)


def decode_tensor(obj: dict) -> np.ndarray:
    """Inverse of `tensor` (for clients and tests)."""
    return np.frombuffer(obj["data"], dtype=np.dtype(obj["dtype"]).newbyteorder("<")).reshape(obj["shape"])
