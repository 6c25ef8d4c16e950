"""The checkout's root, for tests and helpers that read its files (README, docs, pyproject,
data, the chart): the nearest folder above this one that holds SIE's pyproject.toml, so a
test reads the same root from whichever folder of tests/ it lives in, and never a folder
beside the checkout."""

from __future__ import annotations

from pathlib import Path


def _root() -> Path:
    for folder in Path(__file__).resolve().parents:
        if (folder / "pyproject.toml").is_file() and (folder / "sie_engine").is_dir():
            return folder
    raise RuntimeError(f"{__file__} is not inside an SIE checkout")


REPO = _root()
