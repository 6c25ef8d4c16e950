"""sie_ray on a real local Ray (`ray.init(num_cpus=2)`, once for the module): Ray Data's
`map_batches` with SIE actors, their columns typed for vector databases and equal to the
reference on the same weights: sentence-transformers for MiniLM, SIE's Engine in this process
for the rest (its own tests hold it to transformers / gliner). The in-process actor runs an
Engine of its own; the HTTP actors call a real sie-server. An actor killed mid-job is restarted by
Ray and the job's output is complete; the bulk-index example runs end to end."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
import pyarrow as pa  # noqa: E402

from checkout import REPO  # noqa: E402
from dev_corpus import load_docs, load_queries  # noqa: E402
from integration_recall import COLBERT, SPLADE, sie_server  # noqa: E402
from reliability_models import tiny_model_set  # noqa: E402
from sie_client import EMBEDDED, SIEClient  # noqa: E402
from sie_ray import SIEEncoder, SIEExtractor, SIEScorer  # noqa: E402
from tiny_models import MINILM_DIR  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
CE, GL = "test/ce", "test/gl"
LABELS = ["software", "library", "person"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = True  # rows come back in input order, to compare row by row
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def models(tmp_path_factory, colbert_cards):
    roots = tiny_model_set(tmp_path_factory.mktemp("ray-models"))
    return {"local_models": {CE: str(roots["ce"]), GL: str(roots["gl"])}, "model_dirs": (str(colbert_cards),)}


@pytest.fixture(scope="module")
def server_url(models):
    args = ["--models", *models["model_dirs"]]
    for name, path in models["local_models"].items():
        args += ["--model", f"{name}={path}"]
    with sie_server(*args) as url:
        yield url


@pytest.fixture(scope="module")
def reference(models):
    """SIE's Engine in this process, through the same client, on the same weights."""
    with SIEClient(EMBEDDED, device="cpu", local_models=models["local_models"],
                   model_dirs=models["model_dirs"]) as client:
        yield client


def stage(ds, cls, batch_size: int = 8, batch_format: str = "pyarrow", **kwargs):
    """`ds` through one actor of `cls`; half a CPU slot each, so a pipeline's stages fit the two slots."""
    return ds.map_batches(cls, fn_constructor_kwargs=kwargs, compute=ray.data.ActorPoolStrategy(size=1),
                          batch_size=batch_size, batch_format=batch_format, num_cpus=0.5)


def collect(ds) -> pa.Table:
    """The Dataset's output as one Arrow table, with the types its blocks hold."""
    return pa.concat_tables(ray.get(ds.materialize().to_arrow_refs()))


def matrix(column) -> np.ndarray:
    """A FixedSizeList column as `[rows, dims]`."""
    column = column.combine_chunks()
    return column.flatten().to_numpy().reshape(len(column), column.type.list_size)


def test_engine_actors_match_sentence_transformers(local_ray):
    from sentence_transformers import SentenceTransformer

    docs = load_docs(20)
    # Ray's default numpy batches in, an Arrow table out
    table = collect(stage(ray.data.from_items(docs), SIEEncoder, batch_format="numpy", model=MINILM, device="cpu",
                          output_columns={"dense": "embedding"}))

    assert table.column("id").to_pylist() == [d["id"] for d in docs]
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 384)
    expected = SentenceTransformer(str(MINILM_DIR), device="cpu").encode([d["text"] for d in docs])
    np.testing.assert_allclose(matrix(table.column("embedding")), expected, atol=2e-5)


def test_http_actors_score_encode_sparse_and_extract_like_the_engine(local_ray, server_url, reference):
    docs = load_docs(12)
    queries = ["text editor", "python library", "network daemon"]  # 4 rows each: grouped into 3 score calls
    rows = [{"id": d["id"], "text": d["text"], "query": queries[i % 3]} for i, d in enumerate(docs)]
    ds = ray.data.from_items(rows)
    ds = stage(ds, SIEScorer, model=CE, query_column="query", url=server_url)
    ds = stage(ds, SIEEncoder, model=SPLADE, output_types=["sparse"], url=server_url)
    ds = stage(ds, SIEExtractor, model=GL, labels=LABELS, url=server_url, extract_options={"threshold": 0.2})
    table = collect(ds)

    assert table.schema.field("score").type == pa.float32()
    assert table.schema.field("sparse_indices").type == pa.list_(pa.int32())
    assert table.schema.field("sparse_values").type == pa.list_(pa.float32())
    assert table.schema.field("entities").type.value_type.names == ["text", "label", "score", "start", "end"]

    for i, row in enumerate(rows):
        expected = reference.score(CE, row["query"], [row["text"]]).scores[0].score
        assert table.column("score")[i].as_py() == pytest.approx(expected, abs=1e-5)

    texts = [row["text"] for row in rows]
    for i, item in enumerate(reference.encode(SPLADE, texts, output_types=["sparse"]).items):
        assert table.column("sparse_indices")[i].as_py() == item.sparse.indices.tolist()
        np.testing.assert_allclose(table.column("sparse_values")[i].as_py(), item.sparse.values, atol=1e-5)

    extracted = reference.extract(GL, texts, LABELS, threshold=0.2).items
    assert sum(len(item.entities) for item in extracted) > 0, "the tiny GLiNER found nothing: the check is empty"
    for i, item in enumerate(extracted):
        got = table.column("entities")[i].as_py()
        assert [(e["text"], e["label"], e["start"], e["end"]) for e in got] == \
            [(e.text, e.label, e.start, e.end) for e in item.entities]
        np.testing.assert_allclose([e["score"] for e in got], [e.score for e in item.entities], atol=1e-5)


class _DiesOnFirstBatch(SIEEncoder):
    """An SIE actor whose process exits in its first batch (a node lost, an OOM kill), once per job."""

    def __init__(self, marker: str, **kwargs):
        self.marker = Path(marker)
        super().__init__(**kwargs)

    def __call__(self, batch):
        if not self.marker.exists():
            self.marker.write_text("died")
            os._exit(1)
        return super().__call__(batch)


def test_a_killed_actor_is_restarted_and_its_batch_retried_by_ray(local_ray, server_url, reference,
                                                                  tmp_path):
    # the class is defined here, not in an installed module: Ray's workers get it by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    docs = load_docs(6)
    ds = stage(ray.data.from_items(docs), _DiesOnFirstBatch, batch_size=3, marker=str(tmp_path / "died"),
               model=COLBERT, output_types=["multivector"], url=server_url)
    table = collect(ds)

    assert (tmp_path / "died").read_text() == "died"
    assert table.schema.field("multivector").type == pa.list_(pa.list_(pa.float32(), 16))
    assert table.column("id").to_pylist() == [d["id"] for d in docs]
    expected = reference.encode(COLBERT, [d["text"] for d in docs], output_types=["multivector"]).items
    for i, item in enumerate(expected):
        np.testing.assert_allclose(np.array(table.column("multivector")[i].as_py()), item.multivector, atol=1e-5)


def test_bad_columns_and_options_are_clear_errors_before_any_request(server_url):
    encoder = SIEEncoder(COLBERT, "body", output_types=["multivector"], url=server_url)
    with pytest.raises(ValueError, match="'body' is not in the batch"):
        encoder(pa.table({"text": ["a"]}))
    with pytest.raises(ValueError, match="holds NoneType at batch row 1"):
        encoder(pa.table({"body": ["a", None]}))
    with pytest.raises(ValueError, match="output_types"):
        SIEEncoder(COLBERT, output_types=["colbert"], url=server_url)
    with pytest.raises(ValueError, match="exactly one of query"):
        SIEScorer(CE, query="q", query_column="query", url=server_url)
    with pytest.raises(ValueError, match="labels"):
        SIEExtractor(GL, labels="person", url=server_url)
    # a fixed query for every row, and an empty batch passed through
    scorer = SIEScorer(CE, query="text editor", url=server_url)
    scored = scorer(pa.table({"text": ["vim", "emacs"]}))
    assert scored.column("score").type == pa.float32() and scored.num_rows == 2
    assert scorer(pa.table({"text": pa.array([], pa.string())})).num_rows == 0


def test_bulk_index_example_reads_parquet_embeds_indexes_and_queries(local_ray, server_url, tmp_path):
    spec = importlib.util.spec_from_file_location("ray_bulk_index", REPO / "examples" / "ray_bulk_index.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    docs = load_docs(40)
    ids = {d["id"] for d in docs}
    queries = [q for q in load_queries() if q["relevant"] in ids]
    # against the server (MiniLM is in its built-in catalog): the in-process path is the first test's
    report = example.run(docs, queries, tmp_path, url=server_url, actors=1, batch_size=16)

    assert report["documents"] == 40 and report["queries"] == len(queries) > 0
    assert report["store"] == ("lance" if importlib.util.find_spec("lance") else "qdrant")
    assert report["recall@10"] >= 0.9  # 40 documents: nearly every synopsis finds its package
