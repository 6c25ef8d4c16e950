"""The install commands users copy (README.md's serve and test commands, CONTRIBUTING.md's set-up)
and constraints/cpu.txt agree: a CPU install is PyTorch's CPU build on an ordinary machine too,
not only where a local wheel folder happens to hold it.

PyPI's Linux torch is the CUDA build; the CPU build (`+cpu`) is on PyTorch's own index. So each
command installs torch alone from that index first, then SIE with the constraints, whose `+cpu`
pin keeps that torch (and stops pip, rather than letting it fetch the CUDA build, if the first
step is missing)."""

from __future__ import annotations

import re
import shlex
from importlib.metadata import version

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from checkout import REPO

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CONSTRAINTS = "constraints/cpu.txt"
# the marker environments of the platforms PyTorch publishes wheels for
PLATFORMS = {"linux": {"sys_platform": "linux"}, "win32": {"sys_platform": "win32"},
             "darwin": {"sys_platform": "darwin"}}


def marked_block(text: str, name: str) -> str:
    """The fenced command between `<!-- name -->` and `<!-- /name -->`."""
    return text.split(f"<!-- {name} -->", 1)[1].split(f"<!-- /{name} -->", 1)[0].strip().strip("`").strip()


def contributing_setup() -> str:
    """CONTRIBUTING.md's set-up command: the fenced block under "## Set up"."""
    section = (REPO / "CONTRIBUTING.md").read_text().split("## Set up", 1)[1]
    return re.search(r"^```\n(.*?)^```", section, re.M | re.S).group(1).strip()


def install_commands() -> dict[str, list[list[str]]]:
    """Each install command by where it is written: its `pip install` steps, as words."""
    readme = (REPO / "README.md").read_text()
    blocks = {"README serve": marked_block(readme, "serve"), "README test": marked_block(readme, "test"),
              "CONTRIBUTING set-up": contributing_setup()}
    found = {}
    for where, block in blocks.items():
        words = shlex.split(block)
        steps, start = [], 0
        for i, word in enumerate([*words, "&&"]):
            if word == "&&":
                steps.append(words[start:i])
                start = i + 1
        found[where] = [step for step in steps if step[0].endswith("/pip") and step[1] == "install"]
    return found


def constraint_pins() -> dict[str, Requirement]:
    """constraints/cpu.txt's torch requirement per platform (the one whose marker holds there)."""
    lines = [line.split("#", 1)[0].strip() for line in (REPO / CONSTRAINTS).read_text().splitlines()]
    requirements = [Requirement(line) for line in lines if line]
    assert {r.name for r in requirements} == {"torch"}, f"{CONSTRAINTS} pins only torch: {requirements}"
    pins = {}
    for platform, env in PLATFORMS.items():
        held = [r for r in requirements if r.marker is None or r.marker.evaluate(env)]
        assert len(held) == 1, f"{CONSTRAINTS} must pin torch exactly once on {platform}: {held}"
        pins[platform] = held[0]
    return pins


def pinned_version(requirement: Requirement) -> Version:
    (spec,) = requirement.specifier
    assert spec.operator == "==", f"{requirement}: pin one build with =="
    return Version(spec.version)


def option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def test_constraints_pin_the_cpu_build_where_pypi_has_the_cuda_one():
    pins = constraint_pins()
    for platform in ("linux", "win32"):
        assert pinned_version(pins[platform]).local == "cpu", (
            f"{pins[platform]}: on {platform} PyPI's torch is the CUDA build; pin the +cpu local version, so "
            "pip takes only PyTorch's CPU wheel and stops if it is not there")
    # macOS wheels are CPU builds without a local version; the same release everywhere
    assert pinned_version(pins["darwin"]).local is None
    assert len({pinned_version(p).public for p in pins.values()}) == 1, pins


def test_every_install_command_takes_torch_from_the_cpu_index_first():
    for where, steps in install_commands().items():
        assert steps, f"{where}: no pip install found"
        torch_step, *sie_steps = steps
        assert torch_step[-1] == "torch" and option(torch_step, "--index-url") == CPU_INDEX, (
            f"{where}: the first pip install must be torch alone from {CPU_INDEX}: {' '.join(torch_step)}")
        # its dependencies come from PyPI in the next step: only torch is looked up on PyTorch's index
        assert "--no-deps" in torch_step, f"{where}: {' '.join(torch_step)}"
        assert option(torch_step, "-c") == CONSTRAINTS, f"{where}: the torch step must use {CONSTRAINTS}"
        assert sie_steps, f"{where}: no pip install of SIE after the torch step"
        for step in sie_steps:
            assert option(step, "-c") == CONSTRAINTS, (
                f"{where}: {' '.join(step)} must keep the CPU torch with -c {CONSTRAINTS}")
            assert "--index-url" not in step and "--extra-index-url" not in step, (
                f"{where}: SIE and its dependencies come from PyPI: {' '.join(step)}")


def test_the_pin_is_in_the_server_extra_and_the_cpu_image():
    pin = pinned_version(constraint_pins()["linux"])
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (torch,) = [Requirement(r) for r in extras["server"] if Requirement(r).name == "torch"]
    assert torch.specifier.contains(pin), f"the server extra's {torch} does not admit the CPU pin {pin}"
    dockerfile = (REPO / "docker" / "Dockerfile.cpu").read_text()
    assert f"ARG TORCH_VERSION={pin.public}\n" in dockerfile, "docker/Dockerfile.cpu installs another torch"
    assert f"ARG TORCH_INDEX_URL={CPU_INDEX}\n" in dockerfile, "docker/Dockerfile.cpu takes torch from another index"


def test_the_test_install_here_is_the_cpu_build():
    """This venv came from the README's test command: the torch it holds is the pinned one."""
    pin = constraint_pins()["linux"]
    assert pin.specifier.contains(version("torch")), f"installed torch {version('torch')}, pinned {pin}"


def test_readme_says_what_a_gpu_user_installs():
    readme = (REPO / "README.md").read_text()
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "gpu" in extras and "pip install '.[server,gpu]'" in readme
    gpu = readme.split("**On a GPU machine**", 1)[1].split("\n\n", 1)[0]
    assert CONSTRAINTS in gpu and "CUDA" in gpu, "the README's GPU paragraph says to leave the CPU pin out"
