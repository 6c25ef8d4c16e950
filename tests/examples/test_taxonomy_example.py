"""examples/taxonomy.py, the taxonomy pattern (label descriptions embedded once, candidates retrieved per
item, a zero-shot classifier deciding among them), run as a user runs it (`python examples/taxonomy.py`,
from any folder): end to end on a handful of dev documents (the real MiniLM embeds, the GLiClass
stand-in classifies, the report holds every number it promises, progress shows, nothing lands in the
working folder), and its failures are one line, before the long part."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from checkout import REPO

EXAMPLE = REPO / "examples" / "taxonomy.py"
RECALL_AT = (1, 5, 10, 20, 50)  # the depths the report gives (taxonomy.RECALL_AT)
REPORT_NAME = "sie-taxonomy-report.json"
# Embedding the whole corpus takes about 144 s on 2 cores; a failure must come long before that.
FAIL_FAST_S = 90
# What a run must not print: the stand-in's weights-writing bar, transformers' warning about
# GLiClass' config, a traceback
NOISE = ("Writing model shards", "to instantiate a model of type", "Traceback")


def run_example(tmp_path, *args: str, python: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess:
    """`python examples/taxonomy.py ARGS` from an empty working folder, with its own temporary folder."""
    (tmp_path / "cwd").mkdir()
    (tmp_path / "tmp").mkdir()
    command = [sys.executable, *python] if python else [sys.executable, str(EXAMPLE)]
    return subprocess.run([*command, *args], cwd=tmp_path / "cwd", capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp_path / "tmp"), **env})


def test_taxonomy_example_reports_retrieval_and_pipeline(tmp_path):
    done = run_example(tmp_path, "--limit", "12", "--k", "5", "--classifier", "tiny-gliclass", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "tmp" / REPORT_NAME).read_text())  # written to the temporary folder
    assert not list((tmp_path / "cwd").iterdir()), "the example left files in the working folder"
    assert f"report: {tmp_path / 'tmp' / REPORT_NAME}" in done.stdout
    assert report["documents"] == 12 and report["k"] == 5
    assert report["section"]["classes"] == 56 and report["tags"]["tags"] == 475
    assert 0 < report["tags"]["documents"] < 12  # about half the documents have debtags
    for part in ("section", "tags"):
        values = report[part]
        recalls = [values[f"retrieval_recall_at_{n}"] for n in RECALL_AT]
        assert recalls == sorted(recalls) and recalls[-1] > 0  # deeper retrieval finds more
        assert values["retrieval_recall_at_k"] == values["retrieval_recall_at_5"]
        for key, value in values.items():
            if "recall" in key or "accuracy" in key or "f1" in key:
                assert 0.0 <= value <= 1.0, (part, key)
    # the real MiniLM finds the right section among 56 for some of these documents
    assert report["section"]["retrieval_recall_at_10"] > 0.3
    assert "retrieval_top1_accuracy" in done.stdout
    # progress of each long stage on stderr, and nothing else there
    for stage in ("embedding documents", "classifying sections", "classifying debtags"):
        assert f"{stage}: 100%" in done.stderr, stage
    assert not [n for n in NOISE if n in done.stderr], done.stderr[-3000:]


def test_an_unavailable_classifier_fails_in_one_line_before_embedding(tmp_path):
    """A Hub classifier offline (an empty Hub cache): the whole corpus is asked for, and the run
    ends at the classifier's load, before any embedding, with the engine's one-line reason."""
    started = time.monotonic()
    done = run_example(tmp_path, "--classifier", "knowledgator/gliclass-small-v1.0", "--device", "cpu",
                       HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "empty-hf-home"))
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("taxonomy.py: 503 model_load_failed: model 'knowledgator/gliclass-small-v1.0'")
    assert "(not_found)" in lines[0] and "hf download knowledgator/gliclass-small-v1.0" in lines[0]
    assert "embedding" not in done.stderr and not done.stdout
    assert not list((tmp_path / "tmp").glob(REPORT_NAME)) and not list((tmp_path / "cwd").iterdir())
    assert elapsed < FAIL_FAST_S, f"took {elapsed:.0f} s: the failure must come before the embedding"


def test_a_stand_in_without_its_library_names_the_extra(tmp_path):
    """tiny-gliclass in an install without the dev extra (gliclass made unimportable): one line that
    says which extra brings it, before any model loads."""
    hide_gliclass = ("-c", "import runpy, sys; sys.modules['gliclass'] = None; sys.argv = sys.argv[1:]; "
                     f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')", str(EXAMPLE))
    done = run_example(tmp_path, "--classifier", "tiny-gliclass", python=hide_gliclass)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        "taxonomy.py: tiny-gliclass is built with the gliclass library, which the dev extra installs: "
        "pip install -e '.[dev]'"]
