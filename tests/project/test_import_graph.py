"""The project's import graph has no cycles: no module imports one that imports it back,
at top level or inside a function (the architecture's "one direction" rule: server ->
engine -> contract; adapters -> client -> contract; plug-ins named by string in a registry
are imported by it, and import only what sits below the registry)."""

from __future__ import annotations

import ast
from pathlib import Path

from checkout import REPO

ROOT = REPO
# import name -> folder, as pyproject's package-dir maps them
PACKAGES = {
    "sie_contract": ROOT / "sie_contract",
    "sie_engine": ROOT / "sie_engine",
    "sie_server": ROOT / "server",
    "sie_client": ROOT / "integrations" / "sie_client",
    "sie_chroma": ROOT / "integrations" / "sie_chroma",
    "sie_qdrant": ROOT / "integrations" / "sie_qdrant",
    "sie_weaviate": ROOT / "integrations" / "sie_weaviate",
    "sie_lancedb": ROOT / "integrations" / "sie_lancedb",
    "sie_langchain": ROOT / "integrations" / "sie_langchain",
    "sie_llamaindex": ROOT / "integrations" / "sie_llamaindex",
    "sie_haystack": ROOT / "integrations" / "sie_haystack",
    "sie_ray": ROOT / "integrations" / "sie_ray",
}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file (a package's own submodules
    reached through `from package import submodule` included)."""
    is_package = path.name == "__init__.py"
    base = name if is_package else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join(anchor + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
    resolved = set()
    for target in targets:
        while target and target not in known:  # `pkg.mod.attr` -> `pkg.mod`
            target = target.rpartition(".")[0]
        if target and target != name and not name.startswith(target + "."):  # a module's own parents run first
            resolved.add(target)
    return resolved


def test_no_module_imports_one_that_imports_it_back():
    found = modules()
    known = set(found)
    graph = {name: imports_of(name, path, known) for name, path in found.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_contract_and_the_client_import_no_torch():
    """The wire contract and the client install and import without the engine."""
    found = modules()
    known = set(found)
    for name, path in found.items():
        if name.startswith(("sie_contract", "sie_client")) and name != "sie_client.embedded":
            engine_imports = {m for m in imports_of(name, path, known) if m.startswith(("sie_engine", "sie_server"))}
            assert not engine_imports, f"{name} imports {engine_imports}"
            assert "import torch" not in path.read_text(), name


def test_the_checkpoint_resolver_imports_no_head():
    """Describing a directory (sie_engine.checkpoints and every layout module the registry names)
    reaches no head, at top level or inside a function: a layout sits below the heads it serves,
    so inspecting a directory never builds or imports model code it does not need."""
    from sie_engine.models import HEADS, LAYOUTS

    found = modules()
    known = set(found)
    graph = {name: imports_of(name, path, known) for name, path in found.items()}
    head_modules = {target.partition(":")[0] for target in HEADS.values()}
    reached: set[str] = set()
    todo = ["sie_engine.checkpoints", *LAYOUTS.values()]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    heads = sorted(m for m in reached
                   if m in head_modules or m == "sie_engine.heads" or m.startswith("sie_engine.heads."))
    assert not heads, f"the checkpoint resolver reaches heads: {heads}"
    assert set(LAYOUTS.values()) <= reached
