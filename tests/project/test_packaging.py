"""The test suite runs the dependency versions users get: every transformers the server
extra admits is one the test environment can install too (gliner, the GLiNER reference,
caps it), so pip resolves the same newest transformers for `.[server]` and `.[all,dev]`."""

from __future__ import annotations

from importlib.metadata import requires, version

import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from checkout import REPO

PYPROJECT = REPO / "pyproject.toml"


def _extra_spec(extra: str, name: str) -> SpecifierSet:
    """The specifier the pyproject extra gives `name` (empty when it names no version)."""
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    specs = [Requirement(r).specifier for r in extras[extra] if Requirement(r).name == name]
    return SpecifierSet(",".join(str(s) for s in specs))


def _test_env_spec(name: str) -> SpecifierSet:
    """What the test install admits for `name`: the dev extra's pin and the caps of the
    reference libraries installed with it."""
    spec = _extra_spec("dev", name)
    for dist in ("gliner", "sentence-transformers"):
        for line in requires(dist) or []:
            requirement = Requirement(line)
            if requirement.name == name and requirement.marker is None:
                spec &= requirement.specifier
    return spec


def _later_versions(current: Version) -> list[Version]:
    """The next patch, minor and major releases after `current`: where the two installs part."""
    major, minor, patch = (current.release + (0, 0))[:3]
    return [Version(f"{major}.{minor}.{patch + 1}"), Version(f"{major}.{minor + 1}.0"), Version(f"{major + 1}.0.0")]


def test_server_extra_admits_no_transformers_the_suite_cannot_test():
    server, tested = _extra_spec("server", "transformers"), _test_env_spec("transformers")
    installed = Version(version("transformers"))
    assert server.contains(installed), f"the suite runs transformers {installed}, outside the server extra's {server}"
    untested = [str(v) for v in _later_versions(installed) if server.contains(v) and not tested.contains(v)]
    assert not untested, (f"the server extra ({server}) admits transformers {untested}, which the test install "
                          f"({tested}) cannot have: users would run a transformers the suite never tested")


def test_every_package_ships_its_py_typed_marker():
    """PEP 561: without py.typed in a package (and in the wheel's package data), users' type
    checkers treat every SIE import as Any."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    folders = config["package-dir"]
    top = sorted({name.split(".")[0] for name in config["packages"]})
    missing = [name for name in top if not (PYPROJECT.parent / folders.get(name, name) / "py.typed").is_file()]
    assert not missing, f"packages without a py.typed marker: {missing}"
    assert "py.typed" in config["package-data"]["*"], "py.typed is not in the wheel's package data"


def test_every_package_folder_is_in_the_wheel():
    """setuptools ships only the packages pyproject lists: a folder left out is missing from a
    non-editable install (the README's serve command), though every editable test run finds it."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    folders = config["package-dir"]
    listed = set(config["packages"])
    found = set()
    for top in {name.split(".")[0] for name in listed}:
        root = PYPROJECT.parent / folders.get(top, top)
        for init in root.rglob("__init__.py"):
            found.add(".".join([top, *init.parent.relative_to(root).parts]))
    assert sorted(found - listed) == [], "package folders pyproject's packages list leaves out of the wheel"
