"""examples/taxonomy.py, the taxonomy pattern (label descriptions embedded once, candidates retrieved per
item, a zero-shot classifier deciding among them), runs end to end on a handful of dev documents: the
real MiniLM embeds, the GLiClass stand-in classifies, and the report holds every number it promises."""

from __future__ import annotations

import importlib.util
import sys

from checkout import REPO

EXAMPLE = REPO / "examples" / "taxonomy.py"


def _example():
    spec = importlib.util.spec_from_file_location("taxonomy_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_taxonomy_example_reports_retrieval_and_pipeline(tmp_path, capsys):
    taxonomy = _example()
    report = taxonomy.main(["--limit", "12", "--k", "5", "--classifier", "tiny-gliclass", "--device", "cpu",
                            "--json", str(tmp_path / "report.json")])
    assert report["documents"] == 12 and report["k"] == 5
    assert report["section"]["classes"] == 56 and report["tags"]["tags"] == 475
    assert 0 < report["tags"]["documents"] < 12  # about half the documents have debtags
    for part in ("section", "tags"):
        values = report[part]
        recalls = [values[f"retrieval_recall_at_{n}"] for n in taxonomy.RECALL_AT]
        assert recalls == sorted(recalls) and recalls[-1] > 0  # deeper retrieval finds more
        assert values["retrieval_recall_at_k"] == values["retrieval_recall_at_5"]
        for key, value in values.items():
            if "recall" in key or "accuracy" in key or "f1" in key:
                assert 0.0 <= value <= 1.0, (part, key)
    # the real MiniLM finds the right section among 56 for some of these documents
    assert report["section"]["retrieval_recall_at_10"] > 0.3
    assert (tmp_path / "report.json").is_file()
    assert "retrieval_top1_accuracy" in capsys.readouterr().out
