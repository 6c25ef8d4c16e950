"""tests/helpers/real_checkpoints.py builds each cached checkpoint once, even when several
test workers (pytest-xdist) ask for it at the same time."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import real_checkpoints

WEIGHTS = b"not really a safetensors file"


def test_concurrent_builds_fetch_once_and_all_see_the_whole_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SIE_TEST_CACHE", str(tmp_path / "cache"))
    fills = []

    def fill(work: Path) -> Path:
        fills.append(work)
        time.sleep(0.5)  # a fetch long enough for every other caller to arrive while it runs
        folder = work / "model"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(WEIGHTS)
        return folder

    got: list[Path] = []
    workers = [threading.Thread(target=lambda: got.append(real_checkpoints._build(
        "toy-1", hashlib.sha256(WEIGHTS).hexdigest(), fill))) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(fills) == 1, f"{len(fills)} callers fetched the checkpoint"
    assert got == [tmp_path / "cache" / "toy-1"] * 4
    assert (got[0] / "model.safetensors").read_bytes() == WEIGHTS
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == ["toy-1"]
