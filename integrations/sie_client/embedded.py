"""Embedded mode: the same routes as the HTTP API, answered by an in-process
`sie_engine.Engine` (torch is imported only here, and only when first used).

Routes are the tasks of `sie_contract`'s registry; answers are the dicts an HTTP
answer decodes to (`sie_contract.answers.to_wire`, numpy arrays in place of tensor
objects), so the client parses both modes with the same code and returns the same
types. Engine errors become `SIEError` with the status the server would
send. Engines are shared per configuration within the process: several adapters
in one program load each model once.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from sie_contract.answers import to_wire
from sie_contract.errors import status_of
from sie_contract.registry import get as get_task

from .errors import SIEError

_engines: dict[tuple, Any] = {}
_engines_lock = threading.Lock()


def shared_engine(device: str = "auto", local_models: Mapping[str, str] | None = None,
                  model_dirs: tuple[str, ...] = ()) -> Any:
    """The process-wide engine for this configuration, created on first use.

    local_models: `{name: path}` of Hugging Face-layout directories served without a card
    (like `sie-server serve --model NAME=PATH`); model_dirs: directories of model cards.
    """
    key = (device, tuple(sorted((local_models or {}).items())), tuple(model_dirs))
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            try:
                from sie_engine import Catalog, Engine, card_from_local_dir
            except ImportError as exc:  # the base install has no torch
                raise ImportError(
                    "SIE's embedded mode runs the engine in-process and needs the server extra "
                    "(pip install '.[server]' in a clone of SIE); "
                    "or pass url='http://host:port' to use a running server"
                ) from exc
            catalog = Catalog.builtin()
            for directory in model_dirs:
                catalog.add_directory(directory)
            for name, path in (local_models or {}).items():
                catalog.add(card_from_local_dir(name, path))
            engine = Engine(catalog, device=device)
            if not _engines:
                atexit.register(close_shared_engines)
            _engines[key] = engine
        return engine


def close_shared_engines() -> None:
    """Stop the embedded engines (at interpreter exit, so their threads end cleanly)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.close()


def _error(exc: Exception) -> SIEError:
    code = getattr(exc, "code", "internal_error")
    message = getattr(exc, "message", str(exc))
    # a load failure says whether waiting can fix it, as the server's error body does
    return SIEError(status_of(code), code, message, getattr(exc, "retry_after", None) or None,
                    reason=getattr(exc, "reason", None), retryable=getattr(exc, "retryable", None))


def _route(method: str, path: str) -> tuple[str, str | None]:
    parts = path.lstrip("/").split("/", 2)  # ["v1", "encode", "org/model"]
    if method == "GET" and parts[:2] == ["v1", "models"]:
        return "models", unquote(parts[2]) if len(parts) > 2 else None
    if method == "POST" and len(parts) == 3 and parts[0] == "v1" and get_task(parts[1]) is not None:
        return parts[1], unquote(parts[2])
    raise SIEError(404, "not_found", f"embedded mode has no route {method} {path}")


def model_answer(info: Any) -> dict:
    return {
        "id": info.id, "object": "model", "owned_by": "sie", "family": info.family, "tasks": list(info.tasks),
        "outputs": list(info.outputs), "dims": dict(info.dims), "matryoshka_dims": list(info.matryoshka_dims),
        "max_seq_len": info.max_seq_len, "state": info.state, "memory_bytes": info.memory_bytes, "error": info.error,
        "weights": {"status": info.weights, "source": info.weights_source, "detail": info.weights_detail},
        "modalities": list(info.modalities), "image_size": info.image_size,
        "pinned": info.pinned, "idle_evict_s": info.idle_evict_s,
    }


class _EmbeddedBase:
    def __init__(self, engine: Any = None, device: str = "auto", local_models: Mapping[str, str] | None = None,
                 model_dirs: tuple[str, ...] = (), timeout: float | None = None):
        self.url = "embedded"
        self._engine = engine
        self._config = (device, dict(local_models or {}), tuple(model_dirs))
        self._timeout = timeout

    @property
    def engine(self) -> Any:
        if self._engine is None:
            device, local_models, model_dirs = self._config
            self._engine = shared_engine(device, local_models, model_dirs)
        return self._engine

    async def _answer(self, method: str, path: str, body: Any = None) -> Any:
        """The answer the server would give for this route and body (on the engine's loop or any other)."""
        route, model = _route(method, path)
        try:
            if route == "models":
                return self._models(model)
            # the body the server would get, checked and answered as the server would
            return to_wire(await self.engine.run(route, model, timeout=self._timeout, **(body or {})))
        except SIEError:
            raise
        except Exception as exc:
            if hasattr(exc, "code"):
                raise _error(exc) from exc
            raise

    def _models(self, model: str | None) -> dict:
        if model is None:
            return {"object": "list", "data": [model_answer(info) for info in self.engine.models()]}
        return model_answer(self.engine.model_info(model))


class AsyncEmbeddedTransport(_EmbeddedBase):
    async def request(self, method: str, path: str, body: Any = None, deadline: float | None = None) -> Any:
        # `deadline` is the HTTP transports'; the engine bounds the run by its own `timeout`
        return await self._answer(method, path, body)

    async def close(self) -> None:
        pass


class EmbeddedTransport(_EmbeddedBase):
    """The async transport's request, run to completion on the engine's own event loop."""

    def request(self, method: str, path: str, body: Any = None, deadline: float | None = None) -> Any:
        import asyncio

        return asyncio.run_coroutine_threadsafe(self._answer(method, path, body), self.engine.loop).result()

    def close(self) -> None:
        pass  # the engine is shared by the process; it lives as long as the process does
