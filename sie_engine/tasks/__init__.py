"""The engine's side of each task in `sie_contract`'s registry: an `async def run(engine,
call)` (`engine`: a `TaskContext`; `call`: the resolved `Call`, tasks/context.py) that
validates the call's fields, prepares work items, queues them and assembles the result.
Implementations are imported when first used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Coroutine
from typing import Any

from sie_contract import registry
from sie_contract.tasks import Task

from ..errors import InvalidRequest

TaskRun = Callable[..., Coroutine[Any, Any, Any]]


def implementation(task: str) -> tuple[Task, TaskRun]:
    """A registered task and the engine's `run` for it; InvalidRequest naming the known tasks."""
    spec = registry.get(task)
    if spec is None:
        raise InvalidRequest(f"unknown task {task!r} (tasks: {', '.join(registry.names())})", field="task")
    module, _, name = spec.implementation.partition(":")
    return spec, getattr(importlib.import_module(module), name)
