"""The document loaders (LangChain's `SIEDocumentLoader`, LlamaIndex's `SIEDocumentReader`, Haystack's
`SIEDocumentConverter`) against one real SIE server serving a tiny random Florence-2
(tests/helpers/florence2_fixtures.py) and a tiny random Donut under the CORD card: each loader's Documents
(for Donut also each page's parsed `data`), for a two-page PDF and a PNG, equal
what the server's extract answers over plain JSON for the same file (text, page number and size,
region boxes), the PDF's pages stay apart, and a bad file gives an error naming it and quoting the
server's message, the way each framework reports one (LlamaIndex's SimpleDirectoryReader and Haystack's
converters skip it; LangChain's loader raises).

The model is random, so its text is gibberish: the tests check that the loaders hand over exactly
what SIE read, not what it reads."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import logging
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml
from PIL import Image

from donut_fixtures import tiny_donut, tiny_donut_processor
from florence2_fixtures import tiny_florence2
from pdf_fixtures import make_pdf
from server_fixtures import start_server
from sie_client import SIEError

MODEL = "tiny/florence2"
DONUT = "naver-clova-ix/donut-base-finetuned-cord-v2"  # its built-in card, on tiny random weights
TASK = "<OCR_WITH_REGION>"  # boxes per line: the tiny model emits enough location tokens in 40 tokens
NEW = 40
DPI = 36  # half a pixel per point: small pages, fast encoders
SIZES = [(200, 300), (300, 200)]  # points; two shapes so the pages cannot be mistaken for each other


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scans")
    (folder / "two.pdf").write_bytes(make_pdf(SIZES, seed=4))
    rng = np.random.default_rng(7)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(buffer, format="PNG")
    (folder / "photo.png").write_bytes(buffer.getvalue())
    (folder / "broken.pdf").write_bytes(b"this is not a PDF")
    return folder


def donut_cards(tmp_path_factory) -> Path:
    """A folder with the CORD Donut card pointed at a tiny random Donut (tests/helpers/donut_fixtures.py)."""
    from sie_engine import Catalog, WeightsSource

    root = tmp_path_factory.mktemp("tiny-donut")
    tiny_donut(root, decoder={"max_position_embeddings": 1024})  # room for the card's max_new_tokens (767)
    tiny_donut_processor(root)
    card = dataclasses.replace(Catalog.builtin().get(DONUT), weights=WeightsSource(path=str(root)))
    cards = tmp_path_factory.mktemp("donut-cards")
    (cards / "cord.yaml").write_text(yaml.safe_dump(card.to_dict()))
    return cards


@pytest.fixture(scope="module")
def sie_url(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-florence2")
    tiny_florence2(root)
    with start_server("--device", "cpu", "--model", f"{MODEL}={root}", "--preload", MODEL,
                      "--models", str(donut_cards(tmp_path_factory)),
                      log_dir=tmp_path_factory.mktemp("sie-server")) as process:
        yield process.url


def server_pages(url: str, path: Path) -> list[dict]:
    """What SIE's extract answers for the file, over plain JSON: per page (text, 1-based number, size in
    points, size in pixels, boxes), an image being one page of its own pixel size."""
    data = path.read_bytes()
    item = {"document": base64.b64encode(data).decode(), "dpi": DPI} if path.suffix == ".pdf" else {
        "image": base64.b64encode(data).decode()}
    response = httpx.post(f"{url}/v1/extract/{MODEL}", json={"items": [item], "task": TASK, "max_new_tokens": NEW},
                          timeout=120)
    assert response.status_code == 200, response.text
    out = []
    for answer in response.json()["items"]:
        regions = answer.get("regions")
        # an OCR region carries the line it read: the page's text is those lines
        text = "\n".join(r["text"] for r in regions) if regions else answer["text"]
        page = answer.get("page")
        if page is None:
            size = Image.open(path).size
            page = {"number": 1, "width": size[0], "height": size[1], "width_px": size[0], "height_px": size[1]}
        out.append({"text": text, "number": page["number"], "size": (page["width"], page["height"]),
                    "pixels": (page["width_px"], page["height_px"]),
                    "boxes": [r["box"] for r in regions or []], "labels": [r["label"] for r in regions or []]})
    return out


@pytest.fixture(scope="module")
def expected(sie_url, files):
    pages = {name: server_pages(sie_url, files / name) for name in ("two.pdf", "photo.png")}
    assert [p["number"] for p in pages["two.pdf"]] == [1, 2]
    assert [p["size"] for p in pages["two.pdf"]] == SIZES
    assert [p["pixels"] for p in pages["two.pdf"]] == [(100, 150), (150, 100)]
    assert sum(len(p["boxes"]) for v in pages.values() for p in v) > 0, "boxes are compared, not only empty lists"
    return pages


def as_pages(documents, text, meta, number) -> list[dict]:
    out = []
    for d in documents:
        m = meta(d)
        regions = m.get("regions") or []
        out.append({"text": text(d), "number": number(m), "size": (m["page_width"], m["page_height"]),
                    "pixels": (m["width_px"], m["height_px"]),
                    "boxes": [r["box"] for r in regions], "labels": [r["label"] for r in regions]})
    return out


def test_langchain_loader_yields_what_sie_read(sie_url, files, expected):
    from langchain_core.document_loaders import BaseLoader

    from sie_langchain import SIEDocumentLoader

    loader = SIEDocumentLoader(file_path=[files / "two.pdf", str(files / "photo.png")], model=MODEL, url=sie_url,
                               task=TASK, max_new_tokens=NEW, dpi=DPI)
    assert isinstance(loader, BaseLoader)
    docs = list(loader.lazy_load())
    got = as_pages(docs, lambda d: d.page_content, lambda d: d.metadata, lambda m: m["page"] + 1)
    assert got == expected["two.pdf"] + expected["photo.png"]
    assert [(d.metadata["source"], d.metadata["page"], d.metadata["total_pages"]) for d in docs] == [
        (str(files / "two.pdf"), 0, 2), (str(files / "two.pdf"), 1, 2), (str(files / "photo.png"), 0, 1)]
    assert {d.metadata["model"] for d in docs} == {MODEL}

    async def load_async():
        return [d async for d in loader.alazy_load()]

    assert [(d.page_content, d.metadata) for d in asyncio.run(load_async())] == [
        (d.page_content, d.metadata) for d in docs]

    bad = SIEDocumentLoader(file_path=files / "broken.pdf", model=MODEL, url=sie_url, task=TASK)
    with pytest.raises(SIEError) as raised:
        bad.load()
    assert raised.value.status == 400
    assert str(raised.value).startswith(f"400 invalid_request: {files / 'broken.pdf'}: document is not a PDF")
    with pytest.raises(FileNotFoundError, match="missing.png"):
        SIEDocumentLoader(file_path=files / "missing.png", model=MODEL, url=sie_url).load()


def test_llamaindex_reader_alone_and_in_simple_directory_reader(sie_url, files, expected, capsys):
    from llama_index.core import SimpleDirectoryReader
    from llama_index.core.node_parser import TokenTextSplitter
    from llama_index.core.readers.base import BaseReader
    from llama_index.core.schema import MetadataMode

    from sie_llamaindex import SIEDocumentReader

    reader = SIEDocumentReader(model=MODEL, url=sie_url, task=TASK, max_new_tokens=NEW, dpi=DPI)
    assert isinstance(reader, BaseReader)
    docs = reader.load_data(files / "two.pdf", extra_info={"batch": "scans"})
    assert as_pages(docs, lambda d: d.text, lambda d: d.metadata, lambda m: int(m["page_label"])) == expected["two.pdf"]
    assert [(d.metadata["file_name"], d.metadata["batch"], d.metadata["total_pages"]) for d in docs] == [
        ("two.pdf", "scans", 2)] * 2
    # boxes and sizes stay out of what is embedded and chunked: the page's text and its label only
    embedded = docs[0].get_content(metadata_mode=MetadataMode.EMBED)
    assert "regions" not in embedded and "quad_box" not in embedded and "page_label: 1" in embedded
    assert TokenTextSplitter(chunk_size=64, chunk_overlap=0).get_nodes_from_documents(docs)  # metadata fits a chunk
    assert [d.text for d in asyncio.run(reader.aload_data([files / "photo.png"]))] == [
        p["text"] for p in expected["photo.png"]]

    # as SimpleDirectoryReader's file extractor: it passes each path and its file metadata; the broken
    # file is skipped with the server's reason, as LlamaIndex's own readers' failures are
    directory = SimpleDirectoryReader(str(files), file_extractor={".pdf": reader, ".png": reader})
    loaded = directory.load_data()
    by_file: dict[str, list] = {}
    for d in loaded:
        by_file.setdefault(d.metadata["file_name"], []).append(d)
    assert set(by_file) == {"two.pdf", "photo.png"}
    for name, pages in by_file.items():
        got = as_pages(sorted(pages, key=lambda d: int(d.metadata["page_label"])), lambda d: d.text,
                       lambda d: d.metadata, lambda m: int(m["page_label"]))
        assert got == expected[name], name
        assert all(d.metadata["file_size"] == (files / name).stat().st_size for d in pages)  # its own metadata kept
    printed = capsys.readouterr().out
    assert "broken.pdf" in printed and "document is not a PDF" in printed
    with pytest.raises(SIEError, match="broken.pdf: document is not a PDF"):
        reader.load_data(files / "broken.pdf")


def test_haystack_converter_in_a_pipeline(sie_url, files, expected, caplog):
    from haystack import Pipeline
    from haystack.components.writers import DocumentWriter
    from haystack.dataclasses import ByteStream
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from sie_haystack import SIEDocumentConverter

    converter = SIEDocumentConverter(model=MODEL, url=sie_url, task=TASK, max_new_tokens=NEW, dpi=DPI)
    store = InMemoryDocumentStore()
    pipeline = Pipeline()
    pipeline.add_component("converter", converter)
    pipeline.add_component("writer", DocumentWriter(document_store=store))
    pipeline.connect("converter.documents", "writer.documents")
    stream = ByteStream((files / "photo.png").read_bytes(), meta={"file_path": "photo.png", "origin": "upload"})
    with caplog.at_level(logging.WARNING, logger="sie_haystack.converter"):
        pipeline.run({"converter": {"sources": [files / "two.pdf", files / "broken.pdf", stream],
                                    "meta": [{"batch": 1}, {"batch": 2}, {"batch": 3}]}})
    docs = sorted(store.filter_documents(), key=lambda d: (d.meta["batch"], d.meta["page_number"]))
    got = as_pages(docs, lambda d: d.content, lambda d: d.meta, lambda m: m["page_number"])
    assert got == expected["two.pdf"] + expected["photo.png"]
    assert [(d.meta["file_path"], d.meta["batch"], d.meta["total_pages"]) for d in docs] == [
        (str(files / "two.pdf"), 1, 2), (str(files / "two.pdf"), 1, 2), ("photo.png", 3, 1)]
    assert docs[2].meta["origin"] == "upload"  # the ByteStream's meta merged in
    # the broken source is skipped with a warning naming it and the server's reason, as Haystack's converters do
    assert any("broken.pdf: document is not a PDF" in r.getMessage() for r in caplog.records), caplog.text

    strict = SIEDocumentConverter.from_dict({**converter.to_dict(), "init_parameters": {
        **converter.to_dict()["init_parameters"], "raise_on_failure": True}})
    assert strict.model == MODEL and strict.task == TASK and strict.dpi == DPI
    with pytest.raises(SIEError, match="broken.pdf: document is not a PDF"):
        strict.run(sources=[files / "broken.pdf"])
    result = asyncio.run(converter.run_async(sources=[files / "two.pdf"]))
    assert [d.content for d in result["documents"]] == [p["text"] for p in expected["two.pdf"]]


def test_donut_pages_carry_their_parsed_data_in_every_loader(sie_url, files):
    """Donut takes no task: each loader's page is the server's text with its token2json `data` beside it."""
    from sie_haystack import SIEDocumentConverter
    from sie_langchain import SIEDocumentLoader
    from sie_llamaindex import SIEDocumentReader

    pdf = base64.b64encode((files / "two.pdf").read_bytes()).decode()
    response = httpx.post(f"{sie_url}/v1/extract/{DONUT}", json={
        "items": [{"document": pdf, "dpi": DPI}], "max_new_tokens": NEW}, timeout=120)
    assert response.status_code == 200, response.text
    expected = [(item["text"], item["data"]) for item in response.json()["items"]]
    assert len(expected) == 2 and all(data is not None for _, data in expected), expected

    options = {"model": DONUT, "url": sie_url, "task": None, "max_new_tokens": NEW, "dpi": DPI}
    langchain = SIEDocumentLoader(file_path=files / "two.pdf", **options).load()
    assert [(d.page_content, d.metadata["data"]) for d in langchain] == expected
    assert all("regions" not in d.metadata for d in langchain)  # Donut gives no boxes
    llama = SIEDocumentReader(**options).load_data(files / "two.pdf")
    assert [(d.text, d.metadata["data"]) for d in llama] == expected
    assert "data" in llama[0].excluded_embed_metadata_keys  # the page's JSON is not embedded beside its text
    haystack = SIEDocumentConverter(**options).run(sources=[files / "two.pdf"])["documents"]
    assert [(d.content, d.meta["data"]) for d in haystack] == expected
