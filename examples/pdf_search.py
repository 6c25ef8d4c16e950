"""Searching scanned PDFs with SIE: PDF -> OCR -> chunks -> embeddings -> a vector database -> a query.

  1. each PDF's pages are read by an OCR model served by SIE (Florence-2's `<OCR>` task; the server
     renders the pages), through the LangChain loader `sie_langchain.SIEDocumentLoader`: one
     Document per page with its source and page number;
  2. each page's text is cut into overlapping word windows (chunks) that keep their page;
  3. the chunks are embedded by SIE (all-MiniLM-L6-v2) and stored in Chroma (in memory), through
     `sie_chroma.SIEEmbeddingFunction`;
  4. the query is embedded the same way and the nearest chunks are printed with their file and page.

Without PDFs on the command line it makes a sample one in the temporary folder: a page each for a few
Debian package descriptions of the dev corpus (data/), drawn as text (so an OCR model has something
to read), and queries with one of their synopses. Offline, the OCR model is a stand-in with random
weights (`tiny-florence2`, examples/ocr_stand_in.py): its "text" is gibberish, so the hits then say
nothing about quality, only that every stage ran. With the Hub reachable (or the model cached), pass
a real one for real answers:

    python examples/pdf_search.py                                     # sample PDF, stand-in OCR, embedded engine
    python examples/pdf_search.py scans/*.pdf --query "invoice total" --ocr-model microsoft/Florence-2-base
    python examples/pdf_search.py report.pdf --url http://127.0.0.1:8080 --ocr-model microsoft/Florence-2-large

What it needs: `python` is the venv SIE is installed in, with the langchain and chroma extras
(`pip install -e '.[server,langchain,chroma]'`; the embedded engine, no `--url`, needs the server
extra). The embedder is loaded before the OCR starts and the OCR model at the first page, so a model
that cannot be had (a Hub model offline, a typo) ends the run in one line before any long work.
Progress goes to stderr, the hits to stdout; nothing is written outside the temporary folder.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ocr_stand_in  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
EMBEDDER = "sentence-transformers/all-MiniLM-L6-v2"
SAMPLE_PACKAGES = ["libbash-doc", "zeroc-icegrid"]  # the sample PDF's pages: these packages' descriptions
EMBED_BATCH = 64  # chunks per Chroma add (each one SIE encode request)


class Unavailable(Exception):
    """Something the run needs is missing; its message is the one line the user sees."""


def check_installed(args) -> None:
    """What this install lacks for the run asked, as Unavailable (one line), before anything loads."""
    for module, extra in (("langchain_core", "langchain"), ("chromadb", "chroma")):
        if importlib.util.find_spec(module) is None:
            raise Unavailable(f"this example needs the {extra} extra: pip install -e '.[{extra}]'")
    if args.url and args.ocr_model == ocr_stand_in.NAME:
        raise Unavailable(f"{ocr_stand_in.NAME} is built here; with --url, name an OCR model the server serves")
    if not args.url and importlib.util.find_spec("torch") is None:
        raise Unavailable("the embedded engine needs the server extra (pip install -e '.[server]'), "
                          "or pass --url of a running sie-server")
    if args.ocr_model == ocr_stand_in.NAME and (missing := ocr_stand_in.missing_library()):
        raise Unavailable(missing)
    if not args.pdfs and importlib.util.find_spec("PIL") is None:
        raise Unavailable("the sample PDF is drawn with Pillow (the server extra): pip install -e '.[server]'")
    for path in args.pdfs:
        if not path.is_file():
            raise Unavailable(f"{path}: no such file")


def sample_pdf(dest: Path, packages: list[str]) -> tuple[Path, str]:
    """A PDF with one page per package description, drawn as black text on white (A6 at 100 dpi), and
    the first package's synopsis as the query."""
    from PIL import Image, ImageDraw, ImageFont

    def rows(name: str) -> dict[str, dict]:
        with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            return {row["id"]: row for row in map(json.loads, f)}

    docs, queries = rows("debian-dev-docs"), rows("debian-dev-queries")
    font = ImageFont.load_default(size=14)
    pages = []
    for package in packages:
        page = Image.new("RGB", (413, 583), "white")
        draw = ImageDraw.Draw(page)
        words, line, y = docs[package]["text"].split(), "", 20
        for word in words:  # wrap at the page's width
            if draw.textlength(f"{line} {word}", font=font) > 373 and line:
                draw.text((20, y), line, fill="black", font=font)
                line, y = word, y + 20
            else:
                line = f"{line} {word}".strip()
        draw.text((20, y), line, fill="black", font=font)
        pages.append(page)
    pages[0].save(dest, format="PDF", save_all=True, append_images=pages[1:], resolution=100.0)
    return dest, queries[packages[0]]["query"]


def chunks(pages, words: int, overlap: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(id, text, metadata) per window of `words` words, `overlap` shared with the next, never across pages."""
    step = max(1, words - overlap)
    for doc in pages:
        tokens = doc.page_content.split()
        for n, start in enumerate(range(0, max(1, len(tokens) - overlap), step)):
            text = " ".join(tokens[start:start + words])
            if text:
                meta = {"source": doc.metadata["source"], "page": doc.metadata["page"] + 1, "chunk": n}
                yield f"{Path(meta['source']).name}:{meta['page']}:{n}", text, meta


def search(client, args, pdfs: list[Path], query: str) -> list[dict]:
    """Read, chunk, embed, store, query; the hits best first."""
    import chromadb
    from chromadb.config import Settings
    from tqdm import tqdm

    from sie_chroma import SIEEmbeddingFunction
    from sie_langchain import SIEDocumentLoader

    # the embedder first: if it cannot be had, the run fails here, not after the OCR of every page
    client.encode(args.embedder, ["a probe"])
    loader = SIEDocumentLoader(file_path=list(pdfs), model=args.ocr_model, client=client, task=args.task,
                               max_new_tokens=args.max_new_tokens, dpi=args.dpi)
    reading = loader.lazy_load()  # one request per file, its pages yielded when its answer is in
    # the first file before the bar: a refused file or an OCR model that cannot be had is the run's only line
    pages = [page for page in [next(reading, None)] if page is not None]
    with tqdm(initial=len(pages), desc="reading pages", unit="page", file=sys.stderr) as bar:
        for page in reading:
            pages.append(page)
            bar.update(1)
    pieces = list(chunks(pages, args.chunk_words, args.overlap))
    if not pieces:
        raise Unavailable(f"the OCR model read no text in {', '.join(map(str, pdfs))}")
    store = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    collection = store.create_collection("pages", embedding_function=SIEEmbeddingFunction(
        model=args.embedder, client=client), configuration={"hnsw": {"space": "cosine"}})
    with tqdm(total=len(pieces), desc="embedding chunks", unit="chunk", file=sys.stderr) as bar:
        for start in range(0, len(pieces), EMBED_BATCH):
            batch = pieces[start:start + EMBED_BATCH]
            collection.add(ids=[p[0] for p in batch], documents=[p[1] for p in batch],
                           metadatas=[p[2] for p in batch])
            bar.update(len(batch))
    found = collection.query(query_texts=[query], n_results=min(args.k, len(pieces)))
    metadatas, documents, distances = found["metadatas"], found["documents"], found["distances"]
    assert metadatas is not None and documents is not None and distances is not None
    return [{"rank": rank, "score": round(1.0 - float(distance), 4), **meta, "text": text}
            for rank, (meta, text, distance) in enumerate(zip(metadatas[0], documents[0], distances[0]), start=1)]


def engine_for(args, tmp: Path):
    """The built-in catalog, plus the stand-in OCR model (served without a card) if it is the one asked for."""
    from sie_engine import Catalog, Engine, card_from_local_dir

    catalog = Catalog.builtin()
    if args.ocr_model == ocr_stand_in.NAME:
        root = ocr_stand_in.tiny_florence2(tmp / ocr_stand_in.NAME)
        catalog.add(card_from_local_dir(ocr_stand_in.NAME, root))
    return Engine(catalog, device=args.device, max_queue_wait_s=3600.0)


def run(args) -> tuple[str, list[dict]]:
    from sie_client import SIEClient, SIEError

    logging.getLogger("sie_engine.pool").setLevel(logging.ERROR)  # a failed load comes back as the run's error
    try:
        with tempfile.TemporaryDirectory(prefix="sie-pdf-search-") as tmp:
            pdfs, query = list(args.pdfs), args.query
            if not pdfs:
                sample, synopsis = sample_pdf(Path(tmp) / "sample.pdf", SAMPLE_PACKAGES)
                pdfs, query = [sample], query or synopsis
            if not query:
                raise Unavailable("give --query (what to search the PDFs for)")
            engine = None if args.url else engine_for(args, Path(tmp))
            try:
                with SIEClient(**({"url": args.url} if args.url else {"engine": engine})) as client:
                    return query, search(client, args, pdfs, query)
            finally:
                if engine is not None:
                    engine.close()
    except SIEError as exc:
        raise Unavailable(str(exc)) from None


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pdfs", nargs="*", type=Path, help="PDFs (or page images) to search (default: a sample)")
    parser.add_argument("--query", default=None, help="what to search for (default: the sample's query)")
    parser.add_argument("--ocr-model", default=ocr_stand_in.NAME,
                        help=f"{ocr_stand_in.NAME} (a random stand-in) or an OCR model id SIE serves")
    parser.add_argument("--task", default="<OCR>", help="Florence-2's task token (none for Donut: '')")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="bound on each page's generated tokens")
    parser.add_argument("--dpi", type=int, default=None, help="PDF rendering resolution (SIE's default if unset)")
    parser.add_argument("--embedder", default=EMBEDDER, help="the embedding model")
    parser.add_argument("--chunk-words", type=int, default=40, help="words per chunk")
    parser.add_argument("--overlap", type=int, default=10, help="words shared by neighbouring chunks")
    parser.add_argument("--k", type=int, default=3, help="hits to print")
    parser.add_argument("--url", default=None, help="an SIE server (default: the embedded engine)")
    parser.add_argument("--device", default="auto", help="embedded engine's device")
    args = parser.parse_args(argv)
    args.task = args.task or None
    try:
        check_installed(args)
        query, hits = run(args)
    except Unavailable as exc:
        print(f"pdf_search.py: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"query: {query!r} (OCR {args.ocr_model}, embeddings {args.embedder})")
    for hit in hits:
        print(f"{hit['rank']}. {hit['score']:.3f}  {Path(hit['source']).name} page {hit['page']}: {hit['text'][:100]}")
    return hits


if __name__ == "__main__":
    main()
