"""examples/pdf_search.py (PDF -> OCR -> chunks -> embeddings -> Chroma -> a query), run as a user runs it
(`python examples/pdf_search.py`, from an empty folder): end to end on its sample PDF with the tiny
random Florence-2 stand-in reading the pages and the real MiniLM embedding them (the hits name the
sample's pages, progress shows on stderr, nothing lands in the working folder and its temporary one is
removed), and
what it cannot do fails in one line before anything loads."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from checkout import REPO

EXAMPLE = REPO / "examples" / "pdf_search.py"
# What a run must not print: the stand-in's weights-writing bar, a traceback, a warning
NOISE = ("Writing model shards", "Traceback", "Warning")
HIT = re.compile(r"(\d)\. (-?\d\.\d{3})  sample\.pdf page (\d): (.+)")  # rank, score, page, the chunk's start


def run_example(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`python examples/pdf_search.py ARGS` from an empty working folder, with its own temporary folder."""
    (tmp_path / "cwd").mkdir(parents=True)
    (tmp_path / "tmp").mkdir()
    return subprocess.run([sys.executable, str(EXAMPLE), *args], cwd=tmp_path / "cwd", capture_output=True,
                          text=True, timeout=600, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})


def test_the_sample_pdf_is_read_chunked_embedded_stored_and_searched(tmp_path):
    done = run_example(tmp_path, "--device", "cpu", "--max-new-tokens", "16", "--k", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == ("query: 'bash dynamic-like shared libraries - documentation' (OCR tiny-florence2, "
                        "embeddings sentence-transformers/all-MiniLM-L6-v2)")
    hits = [m.groups() for line in lines[1:] if (m := HIT.fullmatch(line))]
    assert len(hits) == len(lines) - 1 == 2, done.stdout
    assert [h[0] for h in hits] == ["1", "2"]
    assert {h[2] for h in hits} == {"1", "2"}  # one chunk per page of gibberish: both pages found
    scores = [float(h[1]) for h in hits]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)
    for stage in ("reading pages: 2page", "embedding chunks: 100%"):
        assert stage in done.stderr, stage
    assert not [n for n in NOISE if n in done.stderr], done.stderr[-3000:]
    assert not list((tmp_path / "cwd").iterdir()), "the example left files in the working folder"
    # its own temporary folder (the sample PDF, the stand-in's weights) is gone; torch may keep its caches there
    assert not list((tmp_path / "tmp").glob("sie-pdf-search-*")), "the example left its temporary folder"


def test_what_it_cannot_do_fails_in_one_line_at_once(tmp_path):
    done = run_example(tmp_path, str(tmp_path / "missing.pdf"), "--query", "x")
    assert done.returncode == 1 and not done.stdout
    assert done.stderr.strip().splitlines() == [f"pdf_search.py: {tmp_path / 'missing.pdf'}: no such file"]
    done = run_example(tmp_path / "url", "--url", "http://127.0.0.1:9")  # the stand-in exists only in-process
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "pdf_search.py: tiny-florence2 is built here; with --url, name an OCR model the server serves"]
