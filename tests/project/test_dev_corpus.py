"""The dev corpus ships with the repository: a fresh clone has every file the tests
and benchmarks read, and nothing reads a directory beside the checkout."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from checkout import REPO
from dev_corpus import DATA_DIR, load_docs, load_labels, load_queries

# A path out of the checkout into a sibling data folder, as the corpus was once read.
OUTSIDE_PATH = re.compile(r"\.\./shared|parents\[2\]|\"shared\"\s*/\s*\"data\"")


def test_corpus_lives_in_the_repository():
    assert DATA_DIR.is_relative_to(REPO)
    docs, queries, labels = load_docs(), load_queries(), load_labels()
    assert (len(docs), len(queries), len(labels)) == (6000, 1500, 5969)
    doc_ids = {d["id"] for d in docs}
    assert all(d["text"] for d in docs)
    # each query has its one relevant document in the corpus; labels describe corpus documents
    assert all(q["relevant"] in doc_ids for q in queries)
    assert {row["id"] for row in labels} <= doc_ids
    assert len({row["section"] for row in labels}) == 56


def test_limit_reads_the_first_rows():
    assert [d["id"] for d in load_docs(3)] == [d["id"] for d in load_docs()[:3]]


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_no_tracked_file_reads_outside_the_checkout():
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.md", "*.toml", "*.yaml", "*.cfg", ".ci/*"],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    me = Path(__file__).resolve().relative_to(REPO).as_posix()
    offenders = [f"{name}:{n}" for name in tracked if name != me and (REPO / name).is_file()
                 for n, line in enumerate((REPO / name).read_text(errors="replace").splitlines(), 1)
                 if OUTSIDE_PATH.search(line)]
    assert not offenders, f"these lines read files outside the repository: {offenders}"
