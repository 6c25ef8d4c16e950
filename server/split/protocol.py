"""The messages between frontends and the engine core (msgpack via msgspec).

A frontend's DEALER socket sends `Call`s and `Cancel`s; the engine core's ROUTER answers each
call with one `Reply` carrying the call's id. The supervisor tells the core a frontend died with
`Gone` (its calls are cancelled: nobody is left to answer). When the admin API changes the cards,
the core sends every frontend a `CatalogUpdate` and each answers `Ack` once it serves the new
catalog. A call may name one of the server's own functions (`function_name`), never code.
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Callable
from typing import Any

import msgspec

import sie_engine.errors as engine_errors

from ..errors import HTTPProblem


class Call(msgspec.Struct, tag=True, array_like=True):
    id: int
    method: str
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    # the task whose wire request struct is the last positional argument, msgpack-encoded
    # (the core decodes it into the same struct type, so the engine sees what one process does)
    struct_task: str | None = None
    struct: bytes = b""


class Cancel(msgspec.Struct, tag=True, array_like=True):
    id: int  # the client of the call is gone (its handler was cancelled)


class Gone(msgspec.Struct, tag=True, array_like=True):
    identity: bytes  # a frontend that died (from the supervisor)


class Ack(msgspec.Struct, tag=True, array_like=True):
    version: int  # the frontend serves the catalog of this CatalogUpdate


class Failure(msgspec.Struct, array_like=True):
    cls: str  # the SIEError class (sie_engine.errors or HTTPProblem)
    message: str
    attrs: dict[str, Any] = {}


class Reply(msgspec.Struct, tag=True, array_like=True):
    id: int
    value: bytes = b""  # pickled return value
    failure: Failure | None = None


class CatalogUpdate(msgspec.Struct, tag=True, array_like=True):
    version: int  # counts the core's changes: a frontend never goes back to an older catalog
    facts: bytes  # pickled: EngineCore.catalog_facts()


Message = Call | Cancel | Gone | Ack
ENCODER = msgspec.msgpack.Encoder()
MESSAGES = msgspec.msgpack.Decoder(Message)
REPLIES = msgspec.msgpack.Decoder(Reply | CatalogUpdate)


def pack_value(value: Any) -> bytes:
    """An engine result (dataclasses of numpy arrays, ModelInfo, EngineStatus, ...). Pickle,
    protocol 5: numpy arrays go as their raw buffers; both ends are this server's own processes."""
    return pickle.dumps(value, protocol=5)


def unpack_value(raw: bytes) -> Any:
    return pickle.loads(raw) if raw else None  # noqa: S301 - from this server's own engine process


def failure_of(exc: engine_errors.SIEError) -> Failure:
    plain = (str, int, float, bool, type(None))
    attrs = {k: v for k, v in vars(exc).items() if k != "message" and isinstance(v, plain)}
    if isinstance(exc, HTTPProblem):
        attrs["code"] = exc.code
    return Failure(type(exc).__name__, exc.message, attrs)


def error_of(failure: Failure) -> engine_errors.SIEError:
    """The engine's error rebuilt as the same class with the same attributes (code, field,
    retry_after...), so the frontend answers exactly what one process answers."""
    cls = HTTPProblem if failure.cls == "HTTPProblem" else getattr(engine_errors, failure.cls, engine_errors.SIEError)
    if not (isinstance(cls, type) and issubclass(cls, engine_errors.SIEError)):
        cls = engine_errors.SIEError
    error = cls.__new__(cls)
    Exception.__init__(error, failure.message)
    error.message = failure.message
    for key, value in failure.attrs.items():
        setattr(error, key, value)
    return error


def function_name(fn: Callable[..., Any]) -> str:
    """How a call names a module-level function of this server (a compat route's tokenizer work)."""
    return f"{fn.__module__}:{fn.__qualname__}"


def function_of(name: str) -> Callable[..., Any]:
    """The function `function_name` named: only a module-level function of the server's own
    package, never arbitrary code (the frontends are this server's processes, but a name is
    all that crosses)."""
    module, _, qualname = name.partition(":")
    fn = None
    if module.startswith("sie_server.") and qualname.isidentifier():
        fn = getattr(importlib.import_module(module), qualname, None)
    if not callable(fn):
        raise engine_errors.SIEError(f"the engine core has no server function {name!r}")
    return fn
