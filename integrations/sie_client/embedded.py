"""Embedded mode: the same routes as the HTTP API, answered by an in-process
`sie_engine.Engine` (torch is imported only here, and only when first used).

Answers are the dicts an HTTP answer decodes to (numpy arrays in place of
tensor objects), so the client parses both modes with the same code and returns
the same types. Engine errors become `SIEError` with the status the server would
send. Engines are shared per configuration within the process: several adapters
in one program load each model once.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any, Mapping
from urllib.parse import unquote

from .errors import STATUS_BY_CODE, SIEError
from .types import Quantized

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
                    "(pip install 'sie[server]'); or pass url='http://host:port' to use a running server"
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
    return SIEError(STATUS_BY_CODE.get(code, 500), code, message, getattr(exc, "retry_after", None) or None)


def _route(method: str, path: str) -> tuple[str, str | None]:
    parts = path.lstrip("/").split("/", 2)  # ["v1", "encode", "org/model"]
    if method == "GET" and parts[:2] == ["v1", "models"]:
        return "models", unquote(parts[2]) if len(parts) > 2 else None
    if method == "POST" and len(parts) == 3 and parts[0] == "v1" and parts[1] in ("encode", "score", "extract"):
        return parts[1], unquote(parts[2])
    raise SIEError(404, "not_found", f"embedded mode has no route {method} {path}")


def _plain(value: Any) -> Any:
    """Engine arrays -> answer values (the engine's Quantized -> the client's)."""
    if value is not None and hasattr(value, "scale") and hasattr(value, "data") and not hasattr(value, "shape"):
        return Quantized(value.data, float(value.scale))
    return value


def encode_answer(result: Any) -> dict:
    items = []
    for item in result.items:
        out: dict[str, Any] = {"id": item.id}
        if item.dense is not None:
            out["dense"] = _plain(item.dense)
        if item.sparse is not None:
            out["sparse"] = {"indices": item.sparse.indices, "values": item.sparse.values}
        if item.multivector is not None:
            out["multivector"] = _plain(item.multivector)
        items.append(out)
    return {"model": result.model, "items": items, "usage": {"tokens": result.tokens}}


def score_answer(result: Any) -> dict:
    scores = [{"id": s.id, "index": s.index, "score": s.score, "rank": s.rank} for s in result.scores]
    return {"model": result.model, "scores": scores, "usage": {"tokens": result.tokens}}


def extract_answer(result: Any) -> dict:
    items = [
        {"id": item.id, "entities": [
            {"text": e.text, "label": e.label, "score": e.score, "start": e.start, "end": e.end} for e in item.entities
        ]}
        for item in result.items
    ]
    return {"model": result.model, "items": items, "usage": {"tokens": result.tokens}}


def model_answer(info: Any) -> dict:
    return {
        "id": info.id, "object": "model", "owned_by": "sie", "family": info.family, "tasks": list(info.tasks),
        "outputs": list(info.outputs), "dims": dict(info.dims), "matryoshka_dims": list(info.matryoshka_dims),
        "max_seq_len": info.max_seq_len, "state": info.state, "memory_bytes": info.memory_bytes, "error": info.error,
    }


ENCODE_OPTIONS = ("output_types", "is_query", "instruction", "dims", "normalize", "output_dtype", "truncate")


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

    def _models(self, model: str | None) -> dict:
        if model is None:
            return {"object": "list", "data": [model_answer(info) for info in self.engine.models()]}
        return model_answer(self.engine.model_info(model))


class AsyncEmbeddedTransport(_EmbeddedBase):
    async def request(self, method: str, path: str, body: Any = None) -> Any:
        route, model = _route(method, path)
        engine = self.engine
        body = body or {}
        try:
            if route == "models":
                return self._models(model)
            if route == "encode":
                options = {k: body[k] for k in ENCODE_OPTIONS if k in body}
                return encode_answer(await engine.encode(model, body.get("items"), timeout=self._timeout, **options))
            if route == "score":
                return score_answer(await engine.score(model, body.get("query"), body.get("items"),
                                                       top_k=body.get("top_k"), timeout=self._timeout))
            return extract_answer(await engine.extract(model, body.get("items"), body.get("labels"),
                                                       threshold=body.get("threshold", 0.5), flat=body.get("flat", True),
                                                       timeout=self._timeout))
        except SIEError:
            raise
        except Exception as exc:
            if hasattr(exc, "code"):
                raise _error(exc) from exc
            raise

    async def close(self) -> None:
        pass


class EmbeddedTransport(_EmbeddedBase):
    """The async transport's request, run to completion on the engine's own event loop."""

    def request(self, method: str, path: str, body: Any = None) -> Any:
        import asyncio

        coro = AsyncEmbeddedTransport.request(self, method, path, body)
        return asyncio.run_coroutine_threadsafe(coro, self.engine.loop).result()

    def close(self) -> None:
        pass  # the engine is shared by the process; it lives as long as the process does
