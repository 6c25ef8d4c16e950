"""A ColBERT model filling single-vector indexes through MUVERA, with the real local-mode
clients: Qdrant (a MUVERA vector beside the MAX_SIM multivector, from one SIE call;
`multistage_search` prefetches on the MUVERA vector and rescores with MaxSim, the
FastEmbed / Qdrant recipe) and LanceDB ("sie-muvera" in a plain Vector column, searched by
dot product). The stored vectors are FastEmbed's `Muvera` over SIE's multivectors; the
rankings equal brute force doing the same stages. (Tiny random ColBERT: compared, not judged.)"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
pytest.importorskip("lancedb")
pytest.importorskip("fastembed")
import lancedb  # noqa: E402
from fastembed.postprocess.muvera import Muvera  # noqa: E402
from lancedb.embeddings import get_registry  # noqa: E402
from lancedb.pydantic import LanceModel, Vector  # noqa: E402
from qdrant_client import QdrantClient, models  # noqa: E402

from integration_recall import COLBERT, SMALL_SAMPLE_DOCS, brute_force_maxsim, sample  # noqa: E402
from sie_client import SIEClient  # noqa: E402
from sie_lancedb import SIEMuveraEmbeddings  # noqa: E402  (registers "sie-muvera")
from sie_qdrant import SIEQdrant, point_id  # noqa: E402

PARAMS = {"k_sim": 4, "dim_proj": 8, "r_reps": 10, "random_seed": 3}  # 1,280 dimensions


def top(scores: np.ndarray, ids: list[str], k: int) -> list[str]:
    return [ids[j] for j in np.argsort(-scores, kind="stable")[:k]]


def test_qdrant_prefetch_on_muvera_then_max_sim(sie_url):
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    doc_ids, texts = [d["id"] for d in docs], [q["query"] for q in queries[:40]]
    helper = SIEQdrant(dense_model=None, multivector_model=COLBERT, muvera_model=COLBERT, muvera=PARAMS,
                       client=SIEClient(sie_url))
    qdrant = QdrantClient(":memory:")
    helper.create_collection(qdrant, "debian")
    config = qdrant.get_collection("debian").config.params.vectors["muvera"]
    assert config.size == 1280 and config.distance == models.Distance.DOT
    helper.upsert(qdrant, "debian", [d["text"] for d in docs], ids=doc_ids)
    stored = qdrant.retrieve("debian", ids=[point_id(i) for i in doc_ids], with_vectors=True, with_payload=True)
    by_id = {p.payload["id"]: p.vector for p in stored}
    reference = Muvera(16, **PARAMS)
    for i in doc_ids[:20]:  # Qdrant keeps what SIE sent: FastEmbed's encoding of the stored token vectors
        np.testing.assert_allclose(by_id[i]["muvera"], reference.process_document(np.array(by_id[i]["multivector"])),
                                   rtol=1e-5, atol=1e-5)
    found = helper.multistage_search_batch(qdrant, "debian", texts, limit=10, prefetch_limit=30)
    fdes = np.array([by_id[i]["muvera"] for i in doc_ids])
    agree = 0
    for query, points in zip(helper.embed_queries(texts), found):
        np.testing.assert_allclose(query["muvera"], reference.process_query(np.array(query["multivector"])),
                                   rtol=1e-5, atol=1e-5)
        candidates = top(fdes @ np.array(query["muvera"]), doc_ids, 30)
        expected = brute_force_maxsim(candidates, [by_id[c]["multivector"] for c in candidates],
                                      [query["multivector"]])[0]
        agree += expected[:3] == [p.payload["id"] for p in points[:3]]
    assert agree >= 0.95 * len(texts)
    with pytest.raises(ValueError, match="muvera_model"):
        SIEQdrant(dense_model=None, multivector_model=COLBERT, muvera=PARAMS, client=SIEClient(sie_url))
    with pytest.raises(ValueError, match="k_sim"):
        SIEQdrant(dense_model=None, muvera_model=COLBERT, muvera={"k_sim": 0}, client=SIEClient(sie_url))


def test_lancedb_muvera_function(sie_url, tmp_path):
    func = get_registry().get("sie-muvera").create(model=COLBERT, url=sie_url, **PARAMS)
    assert isinstance(func, SIEMuveraEmbeddings) and func.ndims() == 1280

    class Doc(LanceModel):
        doc_id: str
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    docs, queries = sample(SMALL_SAMPLE_DOCS)
    table = lancedb.connect(tmp_path).create_table("debian", schema=Doc)
    table.add([{"doc_id": d["id"], "text": d["text"]} for d in docs])
    rows = {row["doc_id"]: row["vector"] for row in table.to_arrow().to_pylist()}
    client, reference = SIEClient(sie_url), Muvera(16, **PARAMS)
    tokens = client.encode(COLBERT, [d["text"] for d in docs[:20]]).items
    for d, item in zip(docs, tokens):
        np.testing.assert_allclose(rows[d["id"]], reference.process_document(item.multivector), rtol=1e-5, atol=1e-5)
    doc_ids = [d["id"] for d in docs]
    fdes = np.array([rows[i] for i in doc_ids])
    agree = 0
    for q in queries[:30]:
        hits = table.search(q["query"]).metric("dot").limit(5).to_list()
        query = np.asarray(func.compute_query_embeddings(q["query"])[0])
        agree += [h["doc_id"] for h in hits[:3]] == top(fdes @ query, doc_ids, 3)
    assert agree >= 0.95 * 30
    with pytest.raises(ValueError, match="k_sim"):
        get_registry().get("sie-muvera").create(model=COLBERT, url=sie_url, k_sim=20).ndims()


def test_qdrant_documents_with_the_muvera_output(sie_url):
    """qdrant-client's own `models.Document` with `output_type: muvera` (use_sie): the stored and
    the query vectors are SIE's muvera outputs for the same parameters."""
    from sie_qdrant import use_sie

    qdrant = use_sie(QdrantClient(":memory:"), sie_url)
    qdrant.create_collection("m", vectors_config={"muvera": models.VectorParams(size=1280,
                                                                                distance=models.Distance.DOT)})
    docs = [d["text"] for d in sample(SMALL_SAMPLE_DOCS)[0][:8]]
    options = {"output_type": "muvera", "muvera": PARAMS}
    qdrant.upsert("m", [models.PointStruct(id=i, vector={"muvera": models.Document(
        text=text, model=f"sie/{COLBERT}", options=options)}) for i, text in enumerate(docs)])
    client = SIEClient(sie_url)
    expected = client.encode(COLBERT, docs, output_types=["muvera"], muvera=PARAMS).items
    stored = sorted(qdrant.retrieve("m", ids=list(range(len(docs))), with_vectors=True), key=lambda p: p.id)
    np.testing.assert_allclose([p.vector["muvera"] for p in stored], [e.muvera for e in expected], rtol=1e-6,
                               atol=1e-6)
    query = client.encode(COLBERT, [docs[0]], output_types=["muvera"], muvera=PARAMS, is_query=True).items[0].muvera
    hits = qdrant.query_points("m", query=models.Document(text=docs[0], model=f"sie/{COLBERT}", options=options),
                               using="muvera", limit=3).points
    assert [h.id for h in hits] == top(np.array([e.muvera for e in expected]) @ query, list(range(len(docs))), 3)
