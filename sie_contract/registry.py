"""The task registry: every kind of work SIE serves, by name.

From it come the Engine's methods, the server's routes and field checks, the OpenAPI
document, the routes that count as work (draining, in-flight), the client's calls
(HTTP and embedded) and the router's route matching. The built-in tasks are there
from the start; `register` adds a plug-in's (a server or router reads the registry
when its app is made).
"""

from __future__ import annotations

from .builtin import BUILTIN
from .tasks import Task

_REGISTRY: dict[str, Task] = {task.name: task for task in BUILTIN}
# names the Engine and the clients use for themselves: a task may not take them
RESERVED = frozenset({"run", "run_sync", "models", "model", "model_info", "status", "load", "load_sync", "card",
                      "close", "drain", "queued", "request", "embeddings"})


def register(task: Task) -> Task:
    """Add a task (or replace one of the same name); it then appears everywhere the registry is read."""
    if not task.name.isidentifier() or task.name.startswith("_") or task.name.endswith("_sync"):
        raise ValueError(f"task name {task.name!r} must be a Python identifier without a leading _ or a "
                         f"trailing _sync (it becomes a method and a route)")
    if task.name in RESERVED:
        raise ValueError(f"task name {task.name!r} is taken by the Engine or the clients; choose another")
    required_after_optional = [f.name for i, f in enumerate(task.fields)
                               if f.required and any(not g.required for g in task.fields[:i])]
    if required_after_optional:
        raise ValueError(f"task {task.name}: required fields come first ({', '.join(required_after_optional)})")
    positional_after_keyword = [f.name for i, f in enumerate(task.fields) if f.positional and any(
        not (g.required or g.positional) for g in task.fields[:i])]
    if positional_after_keyword:
        raise ValueError(f"task {task.name}: positional fields come right after the required ones "
                         f"({', '.join(positional_after_keyword)})")
    _REGISTRY[task.name] = task
    return task


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def get(name: str) -> Task | None:
    return _REGISTRY.get(name)


def all_tasks() -> list[Task]:
    """Every registered task, built-ins first, then in registration order."""
    return list(_REGISTRY.values())


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)
