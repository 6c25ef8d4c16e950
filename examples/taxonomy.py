"""Classifying items into a large taxonomy with SIE: retrieve candidate labels, then let a
zero-shot classifier decide among them.

A zero-shot classifier reads every candidate label (an NLI cross-encoder runs once per item and
label, GLiClass puts all labels in one sequence), so neither scales to a taxonomy of thousands of
labels. The pattern that does:

  1. embed each label's description once (all-MiniLM-L6-v2, served by SIE);
  2. per item, embed its text and retrieve the k labels whose descriptions are nearest
     (a matrix product here; a vector database at scale);
  3. ask the classifier about those k candidates only (`extract` with per-item labels).

On the dev corpus (Debian package descriptions, data/) the taxonomy is Debian's own: the
`section` (56 classes, one per package) and the debtags (475 tags over 31 facets, several per
package, on about half of them). The report gives, for both, the retrieval stage alone (recall@k
of the candidates, top-1 accuracy) and the full pipeline. Offline, the classifier is a stand-in
with random weights (examples/stand_ins.py), so the pipeline's numbers only show the mechanics;
pass a real one (`--classifier knowledgator/gliclass-small-v1.0`, with hub access) for real ones.

    python examples/taxonomy.py                          # every labelled document, embedded engine
    python examples/taxonomy.py --limit 500 --classifier tiny-gliclass
    python examples/taxonomy.py --url http://127.0.0.1:8080 --classifier MoritzLaurer/deberta-v3-base-zeroshot-v2.0

What it needs: `python` is the venv SIE is installed in (`.venv/bin/python` after the README's
install). The embedded engine (no `--url`) needs the server extra; `--classifier tiny-gliclass`
also the dev extra (`pip install -e '.[dev]'`, for the gliclass library it is built with); with
`--url`, the base install and a running `sie-server serve`. Both models are loaded first, so a
classifier that cannot be had (a Hub model offline, a typo) ends the run at once, in one line,
before the embedding (about 2.5 minutes on a 2-core CPU for the whole corpus) starts. Progress
goes to stderr; the report to stdout and, as JSON, to `--json PATH` (default: the system's
temporary folder, never the clone).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stand_ins import STAND_INS, missing_library  # noqa: E402
from taxonomy_labels import SECTIONS, section_text, tag_text  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
EMBEDDER = "sentence-transformers/all-MiniLM-L6-v2"
RECALL_AT = (1, 5, 10, 20, 50)  # the retrieval stage's recall at these depths, whatever k the classifier gets
EMBED_CHUNK = 256  # texts per encode request: the progress bar moves per chunk; the engine batches across them
EMBED_IN_FLIGHT = 4  # chunks in flight, so the engine always has the next batch queued
REPORT_NAME = "sie-taxonomy-report.json"  # the JSON report's file in the temporary folder, unless --json says


class Unavailable(Exception):
    """Something the run needs is missing; its message is the one line the user sees."""


def labelled_docs(limit: int | None) -> tuple[list[dict], list[str]]:
    """`{id, text, section, tags}` for every document with labels, in corpus order, and every debtag
    of the corpus (all are candidates, also those a `--limit` subset lacks)."""
    def rows(name):
        with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    labels = {row["id"]: row for row in rows("debian-dev-labels")}
    docs = [{**doc, **labels[doc["id"]]} for doc in rows("debian-dev-docs") if doc["id"] in labels]
    return (docs[:limit] if limit else docs), sorted({t for row in labels.values() for t in row["tags"]})


def nearest(doc_vectors: np.ndarray, label_vectors: np.ndarray, k: int) -> np.ndarray:
    """`[N, k]` indices of each document's k nearest labels, nearest first (vectors are normalised)."""
    sims = doc_vectors @ label_vectors.T
    top = np.argpartition(-sims, min(k, sims.shape[1] - 1), axis=1)[:, :k]
    order = np.take_along_axis(sims, top, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, axis=1)


async def check_models(client, classifier: str) -> None:
    """Load the embedder and the classifier with one tiny request each, before the long work: a model
    that cannot be had (not cached with the Hub offline, a wrong id) fails here, not after minutes of
    embedding. Raises sie_client's SIEError."""
    await client.encode(EMBEDDER, ["a probe"])
    await client.extract(classifier, ["a probe"], ["first label", "second label"])


async def embed(client, texts: list[str], what: str) -> np.ndarray:
    """`[N, dims]` vectors of `texts`, in order, requested in chunks so that a bar shows the progress."""
    gate = asyncio.Semaphore(EMBED_IN_FLIGHT)
    with tqdm(total=len(texts), desc=f"embedding {what}", unit="text", file=sys.stderr) as bar:
        async def one(start: int) -> np.ndarray:
            async with gate:
                vectors = (await client.encode(EMBEDDER, texts[start:start + EMBED_CHUNK])).dense_matrix()
            bar.update(len(vectors))
            return vectors

        return np.concatenate(await asyncio.gather(*(one(s) for s in range(0, len(texts), EMBED_CHUNK))))


async def classify(client, model: str, texts: list[str], candidates: list[list[str]], multi_label: bool,
                   concurrency: int, what: str) -> list[list]:
    """Per item, the classifier's answer over its own candidates: one request per item, many in flight
    (the server packs them into shared batches)."""
    gate = asyncio.Semaphore(concurrency)
    with tqdm(total=len(texts), desc=f"classifying {what}", unit="item", file=sys.stderr) as bar:
        async def one(text, labels):
            async with gate:
                result = await client.extract(model, [text], labels, multi_label=multi_label)
            bar.update(1)
            return result.items[0].classifications

        return await asyncio.gather(*(one(t, c) for t, c in zip(texts, candidates)))


def macro_f1(truth: list[str], predicted: list[str]) -> float:
    classes = set(truth) | set(predicted)
    scores = []
    for c in classes:
        tp = sum(t == c and p == c for t, p in zip(truth, predicted))
        fp = sum(t != c and p == c for t, p in zip(truth, predicted))
        fn = sum(t == c and p != c for t, p in zip(truth, predicted))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores)) if scores else 0.0


def micro_f1(truth: list[set], predicted: list[set]) -> float:
    tp = sum(len(t & p) for t, p in zip(truth, predicted))
    fp = sum(len(p - t) for t, p in zip(truth, predicted))
    fn = sum(len(t - p) for t, p in zip(truth, predicted))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


async def evaluate(client, classifier: str, docs: list[dict], tags: list[str], k: int, concurrency: int) -> dict:
    sections = sorted(SECTIONS)  # every section is a candidate, also those absent from a --limit subset
    started = time.monotonic()
    label_texts = [section_text(s) for s in sections] + [tag_text(t) for t in tags]
    label_vectors = await embed(client, label_texts, "label descriptions")  # once, for every item to come
    doc_vectors = await embed(client, [d["text"] for d in docs], "documents")
    embed_s = time.monotonic() - started
    report: dict[str, Any] = {"documents": len(docs), "k": k, "embed_seconds": round(embed_s, 1)}

    # sections: one per document
    section_vectors = label_vectors[:len(sections)]
    top = nearest(doc_vectors, section_vectors, k)
    truth = [d["section"] for d in docs]
    retrieved_first = [sections[row[0]] for row in top]
    candidates = [[section_text(sections[j]) for j in row] for row in top]
    by_text = {section_text(s): s for s in sections}
    started = time.monotonic()
    answers = await classify(client, classifier, [d["text"] for d in docs], candidates, False, concurrency,
                             "sections")
    chosen = [by_text[a[0].label] for a in answers]
    ranked = nearest(doc_vectors, section_vectors, max(RECALL_AT))
    report["section"] = {
        "classes": len(sections),
        **{f"retrieval_recall_at_{n}": _mean(t in {sections[j] for j in row[:n]} for t, row in zip(truth, ranked))
           for n in RECALL_AT},
        "retrieval_recall_at_k": _mean(t in {sections[j] for j in row} for t, row in zip(truth, top)),
        "retrieval_top1_accuracy": _mean(t == p for t, p in zip(truth, retrieved_first)),
        "retrieval_top1_macro_f1": macro_f1(truth, retrieved_first),
        "pipeline_accuracy": _mean(t == p for t, p in zip(truth, chosen)),
        "pipeline_macro_f1": macro_f1(truth, chosen),
        "classify_seconds": round(time.monotonic() - started, 1),
    }

    # debtags: several per document, on the documents that have any
    tagged = [i for i, d in enumerate(docs) if d["tags"]]
    tag_vectors = label_vectors[len(sections):]
    top = nearest(doc_vectors[tagged], tag_vectors, k)
    truth_sets = [set(docs[i]["tags"]) for i in tagged]
    by_text = {tag_text(t): t for t in tags}
    started = time.monotonic()
    answers = await classify(client, classifier, [docs[i]["text"] for i in tagged],
                             [[tag_text(tags[j]) for j in row] for row in top], True, concurrency, "debtags")
    kept = [{by_text[c.label] for c in a if c.score >= 0.5} for a in answers]
    per_doc = max(1, round(_mean(len(t) for t in truth_sets)))
    ranked = nearest(doc_vectors[tagged], tag_vectors, max(RECALL_AT))
    report["tags"] = {
        "tags": len(tags),
        "documents": len(tagged),
        **{f"retrieval_recall_at_{n}": _recall(truth_sets, [[tags[j] for j in row[:n]] for row in ranked])
           for n in RECALL_AT},
        "retrieval_recall_at_k": _recall(truth_sets, [[tags[j] for j in row] for row in top]),
        "retrieval_top1_accuracy": _mean(tags[row[0]] in t for t, row in zip(truth_sets, top)),
        f"retrieval_top{per_doc}_micro_f1": micro_f1(truth_sets, [{tags[j] for j in row[:per_doc]} for row in top]),
        "pipeline_top1_accuracy": _mean(by_text[a[0].label] in t for t, a in zip(truth_sets, answers)),
        "pipeline_micro_f1_at_0.5": micro_f1(truth_sets, kept),
        "classify_seconds": round(time.monotonic() - started, 1),
    }
    return report


def _recall(truth: list[set], retrieved: list[list[str]]) -> float:
    """Micro recall: the share of all true labels found among the retrieved ones."""
    return sum(len(t & set(r)) for t, r in zip(truth, retrieved)) / max(1, sum(len(t) for t in truth))


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else 0.0


def print_report(report: dict, classifier: str) -> None:
    print(f"{report['documents']} documents, k = {report['k']} candidates, classifier {classifier}; "
          f"embedding {report['embed_seconds']} s")
    for part in ("section", "tags"):
        print(f"\n{part}:")
        for key, value in report[part].items():
            print(f"  {key:32} {value:.3f}" if isinstance(value, float) else f"  {key:32} {value}")


async def run(args, engine) -> dict:
    """The evaluation through SIE's client: over HTTP with --url, else on `engine` in this process."""
    from sie_client import AsyncSIEClient

    options = {"url": args.url} if args.url else {"engine": engine}
    async with AsyncSIEClient(**options) as client:
        await check_models(client, args.classifier)
        docs, tags = labelled_docs(args.limit)
        return await evaluate(client, args.classifier, docs, tags, args.k, args.concurrency)


def embedded_engine(args, tmp: Path):
    """An engine with the built-in catalog, plus the stand-in classifier (served without a card) if one is asked for."""
    from sie_engine import Catalog, Engine, card_from_local_dir

    catalog = Catalog.builtin()
    if args.classifier in STAND_INS:
        catalog.add(card_from_local_dir(args.classifier, STAND_INS[args.classifier](tmp / args.classifier)))
    # a batch job: a long queue is expected, not a reason to refuse work (a server's 429s the client retries)
    return Engine(catalog, device=args.device, max_queue_wait_s=3600.0)


def check_installed(args) -> None:
    """What this install lacks for the run asked, as Unavailable (one line), before anything loads."""
    if args.url and args.classifier in STAND_INS:
        raise Unavailable(f"{args.classifier} is built here; with --url, name a model the server serves")
    if not args.url and importlib.util.find_spec("torch") is None:
        raise Unavailable("the embedded engine needs the server extra (pip install -e '.[server]'), "
                          "or pass --url of a running sie-server")
    if args.classifier in STAND_INS and (missing := missing_library(args.classifier)):
        raise Unavailable(missing)


class _GenericConfigWarning(logging.Filter):
    """Drops transformers' "You are using a model of type GLiClass to instantiate a model of type ``":
    the engine reads only the tokenizer of a GLiClass directory, through AutoTokenizer, which first
    parses config.json as a generic config and warns that GLiClass (a type transformers does not
    know) is not that config's; nothing is instantiated from it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "to instantiate a model of type ``" not in record.getMessage()


class _LoadFailureLog(logging.Filter):
    """Drops the embedded engine's "load of M failed" log line: the same failure comes back as the
    request's error, which main prints as the run's one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("load of %s failed")


def evaluate_here(args) -> dict:
    """The whole run, on the embedded engine or over --url; Unavailable when a model cannot be had."""
    from sie_client.errors import SIEError

    logging.getLogger("transformers.configuration_utils").addFilter(_GenericConfigWarning())
    logging.getLogger("sie_engine.pool").addFilter(_LoadFailureLog())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            engine = None if args.url else embedded_engine(args, Path(tmp))
            try:
                return asyncio.run(run(args, engine))
            finally:
                if engine is not None:
                    engine.close()
    except SIEError as exc:
        raise Unavailable(str(exc)) from None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="the first N labelled documents (default: all)")
    parser.add_argument("--k", type=int, default=10, help="candidate labels retrieved per document")
    parser.add_argument("--classifier", default="tiny-nli",
                        help="tiny-nli or tiny-gliclass (random stand-ins), or a model id the engine serves")
    parser.add_argument("--url", default=None, help="an SIE server (default: the embedded engine)")
    parser.add_argument("--device", default="auto", help="embedded engine's device")
    parser.add_argument("--concurrency", type=int, default=64, help="classification requests in flight")
    parser.add_argument("--json", type=Path, default=None,
                        help=f"write the JSON report here (default: {REPORT_NAME} in the temporary folder)")
    args = parser.parse_args(argv)
    try:
        check_installed(args)
        report = evaluate_here(args)
    except Unavailable as exc:
        print(f"taxonomy.py: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print_report(report, args.classifier)
    path = args.json or Path(tempfile.gettempdir()) / REPORT_NAME
    path.write_text(json.dumps(report, indent=2))
    print(f"\nreport: {path}")
    return report


if __name__ == "__main__":
    main()
