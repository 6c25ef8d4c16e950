"""Decode + validate time per request: the server's path before and after the contract was
declared as typed structures (issue #26 part 5), and pydantic v2 as the other candidate.

Bodies: an `encode` of 64 texts (~300 characters each, with options) and a 1-text query
(`is_query`), each as JSON and as msgpack. Per request, from the body's bytes to the
fields a task receives, with the task's own item checks (`validation.parse_encode_items`,
which the encode task still runs for the deployment's limits) included on every path:

- before: orjson / msgpack parse, the route's field check, `Task.request`'s binding
  and the item checks, all as at `--before` (8cd530d; its validation.py is read with git);
- msgspec: `Task.decode` (bytes straight into the request struct), `Task.fields_of`,
  then the item checks;
- pydantic: `model_validate_json` (JSON) or msgpack parse + `model_validate` (strict,
  extra fields forbidden) into models equal to the structs, `model_dump(exclude_none)`,
  then the item checks.

    python bench/bench_decode.py [--repeat 2000] [--before 8cd530d]

Prints microseconds per request: the paths take turns for 9 rounds of `--repeat` requests and
each keeps its fastest round.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import msgpack
import orjson

from sie_contract.builtin import ENCODE
from sie_engine import validation as v

TEXT = ("Search inference engines serve many small models from one process: embeddings for retrieval, "
        "cross-encoders for reranking and zero-shot extractors, each batched by real token counts and packed "
        "without padding so that the GPU stays busy while the host prepares the next batch. ")
ENCODE_BODY = {"items": [{"id": f"doc-{i}", "text": f"{i}: {TEXT}"} for i in range(64)],
               "output_types": ["dense"], "normalize": True, "output_dtype": "float32", "truncate": True}
QUERY_BODY = {"items": ["what does a search inference engine serve?"], "is_query": True}
LIMITS = v.Limits()


# ---- before: today's path at 8cd530d ------------------------------------------
def _check_fields(body: dict, allowed: tuple[str, ...], required: tuple[str, ...]) -> None:
    unknown = [k for k in body if k not in allowed]
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}")
    for name in required:
        if body.get(name) is None:
            raise ValueError(f"{name} is required")


def _bind(options: dict[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = {}
    for name, value in options.items():
        if name not in ENCODE.field_names:
            raise TypeError(name)
        request[name] = value
    return request


def validation_at(commit: str) -> Any:
    """sie_engine/validation.py as it was at `commit`, as a module of the package."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "show", f"{commit}:sie_engine/validation.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("sie_engine._validation_before")
    module.__package__ = "sie_engine"
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(source, f"{commit}:sie_engine/validation.py", "exec"), module.__dict__)
    return module


def task_checks(checks: Any) -> Callable[[dict[str, Any]], None]:
    """The checks the encode task makes before it needs the model's card (`checks`: a validation module)."""
    def run(fields: dict[str, Any]) -> None:
        checks.parse_encode_items(fields["items"], LIMITS)
        checks.check_optional_bool(fields.get("is_query"), "is_query")
        checks.check_optional_bool(fields.get("normalize"), "normalize")
        checks.check_optional_bool(fields.get("truncate"), "truncate")
        checks.check_instruction(fields.get("instruction"), LIMITS)
        checks.check_output_dtype(fields.get("output_dtype"))
    return run


_task_checks = task_checks(v)


def before_path(commit: str) -> Callable[[bytes, bool], dict[str, Any]]:
    old_checks = task_checks(validation_at(commit))

    def run(raw: bytes, is_msgpack: bool) -> dict[str, Any]:
        body = msgpack.unpackb(raw, raw=False) if is_msgpack else orjson.loads(raw)
        if not isinstance(body, dict):
            raise ValueError("not an object")
        _check_fields(body, ENCODE.field_names, ENCODE.required)
        fields = _bind({k: body[k] for k in ENCODE.field_names if body.get(k) is not None})
        old_checks(fields)
        return fields

    return run


# ---- after: the request struct ------------------------------------------------
def after(raw: bytes, is_msgpack: bool) -> dict[str, Any]:
    fields = ENCODE.fields_of(ENCODE.decode(raw, is_msgpack))
    _task_checks(fields)
    return fields


# ---- the other candidate: pydantic v2 -------------------------------------------
def pydantic_path() -> Callable[[bytes, bool], dict[str, Any]]:
    from pydantic import BaseModel, ConfigDict, Field, StringConstraints

    Text = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]

    class Item(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        id: Annotated[str, StringConstraints(max_length=512)] | int | None = None
        text: Text | None = None
        image: Any = None

    Output = Literal["dense", "sparse", "multivector"]

    class Request(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        items: Annotated[list[Text | Item], Field(min_length=1)] | None = None
        output_types: Output | list[Output] | None = None
        is_query: bool | None = None
        instruction: str | None = None
        dims: Annotated[int, Field(ge=1, le=1 << 14)] | None = None
        sparse_labels: bool | None = None
        normalize: bool | None = None
        output_dtype: Literal["float32", "float16", "int8", "binary"] | None = None
        truncate: bool | None = None
        precision: Literal["float32", "float16", "bfloat16", "int8"] | None = None

    def run(raw: bytes, is_msgpack: bool) -> dict[str, Any]:
        model = (Request.model_validate(msgpack.unpackb(raw, raw=False)) if is_msgpack
                 else Request.model_validate_json(raw))
        fields = model.model_dump(exclude_none=True)
        _task_checks(fields)
        return fields

    return run


def timed(paths: dict[str, Callable[[bytes, bool], Any]], raw: bytes, is_msgpack: bool, repeat: int,
          rounds: int = 9) -> list[float]:
    """Microseconds per call of each path: the paths take turns, round after round, and each
    keeps its fastest round (on a shared box, load only ever adds time)."""
    best = {name: float("inf") for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            started = time.perf_counter()
            for _ in range(repeat):
                fn(raw, is_msgpack)
            best[name] = min(best[name], (time.perf_counter() - started) / repeat * 1e6)
    return [best[name] for name in paths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--before", default="8cd530d", help="the commit whose validation.py is 'before'")
    args = parser.parse_args()
    paths: dict[str, Callable[[bytes, bool], Any]] = {"before": before_path(args.before), "msgspec": after}
    try:
        paths["pydantic"] = pydantic_path()
    except ImportError:
        print("pydantic is not installed: its column is left out")
    for name, fn in paths.items():  # every path yields the same fields
        for body in (ENCODE_BODY, QUERY_BODY):
            assert fn(orjson.dumps(body), False) == body, name
    print(f"{'body':<18}{'format':<9}" + "".join(f"{name + ' us':>14}" for name in paths))
    for label, body in (("encode, 64 texts", ENCODE_BODY), ("query, 1 text", QUERY_BODY)):
        for fmt in ("json", "msgpack"):
            raw = msgpack.packb(body) if fmt == "msgpack" else orjson.dumps(body)
            cells = timed(paths, raw, fmt == "msgpack", args.repeat)
            print(f"{label:<18}{fmt:<9}" + "".join(f"{c:>14.1f}" for c in cells))


if __name__ == "__main__":
    main()
