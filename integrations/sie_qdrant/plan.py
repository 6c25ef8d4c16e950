"""`QdrantPlan`: what SIEQdrant and AsyncSIEQdrant share, everything but the I/O:
the named vectors, the collection config, the SIE calls that vectorise texts and
images, and the points and query requests built from SIE's encodings. The two
helpers only add the (awaited or not) calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from qdrant_client import models

from sie_client import DEFAULT_MODEL, EncodeResult
from sie_client.image_inputs import check_names, encode_groups
from sie_contract.shapes import Muvera

from .points import NamedVector, point_id, qdrant_vector

FIRST_STAGE = ("dense", "sparse", "muvera")  # kinds that can find candidates for a multivector rescoring


def part(values: Sequence[Any] | None, start: int, end: int) -> Sequence[Any] | None:
    return None if values is None else values[start:end]


class QdrantPlan:
    def __init__(self, *, dense_model: str | None = DEFAULT_MODEL, sparse_model: str | None = None,
                 multivector_model: str | None = None, rerank_model: str | None = None,
                 dense_name: str = "dense", sparse_name: str = "sparse", multivector_name: str = "multivector",
                 sparse_idf: bool = False, instruction: str | None = None, batch_size: int | None = None,
                 progress: bool | None = None, image_model: str | None = None, image_name: str = "image",
                 muvera_model: str | None = None, muvera_name: str = "muvera",
                 muvera: Mapping[str, int] | None = None):
        """
        *_model: the SIE model for each named vector (None leaves that vector out).
        image_model: an image-text model (CLIP, SigLIP) for a dense vector `image_name` computed
            from each point's image; query texts reach it through the model's text tower, so
            a text finds images. The text vectors stay computed from the points' texts.
        rerank_model: an SIE score model used by `hybrid_search(rerank=True)` / `rerank`.
        muvera_model: a multi-vector model (ColBERT, ColPali) whose MUVERA encoding fills the
            single dense vector `muvera_name` (dot product: MUVERA's inner product approximates
            MaxSim); `muvera` its parameters (FastEmbed's k_sim, dim_proj, r_reps, random_seed).
            With multivector_model the same model, one SIE call gives both, and
            `multistage_search` finds candidates on the MUVERA vector and rescores them with
            MaxSim on the token vectors (the FastEmbed / Qdrant MUVERA recipe).
        sparse_idf: configure the sparse vector with Qdrant's IDF modifier. Off by default:
            Qdrant weighs terms by IDF at query time for BM25-style vectors that carry term
            counts; SPLADE-style models (every sparse model SIE serves) already weigh terms.
        """
        self.vectors = [
            NamedVector(name, kind, model)
            for name, kind, model in ((dense_name, "dense", dense_model), (sparse_name, "sparse", sparse_model),
                                      (multivector_name, "multivector", multivector_model),
                                      (muvera_name, "muvera", muvera_model))
            if model is not None
        ]
        if muvera is not None and muvera_model is None:
            raise ValueError("muvera sets the MUVERA vector's parameters: give muvera_model=... too")
        # convert (not the constructor) checks the bounds here: msgspec.ValidationError, a ValueError
        self.muvera = msgspec.convert(dict(muvera or {}), Muvera)
        if image_model is not None:
            self.vectors.append(NamedVector(image_name, "dense", image_model, source="image"))
        if not self.vectors:
            raise ValueError("give at least one of dense_model, sparse_model, multivector_model, muvera_model, "
                             "image_model")
        check_names(self.vectors)
        self.image_model = image_model
        self.rerank_model = rerank_model
        self.sparse_idf = sparse_idf
        self.instruction = instruction
        self.batch_size = batch_size
        self.progress = progress

    # ---- collection configuration -----------------------------------------
    def vector(self, kind: str) -> NamedVector | None:
        return next((v for v in self.vectors if v.kind == kind), None)

    def sized_vectors_config(self, sizes: Mapping[str, int],
                             distance: models.Distance = models.Distance.COSINE) -> dict[str, models.VectorParams]:
        """Dense and multivector params; `sizes` maps vector names to their dimension (the sync
        helper measures them itself, the async one awaits them first: each has its own
        `vectors_config`)."""
        config = {}
        for v in self.vectors:
            if v.kind == "dense":
                config[v.name] = models.VectorParams(size=sizes[v.name], distance=distance)
            elif v.kind == "multivector":
                config[v.name] = models.VectorParams(
                    size=sizes[v.name], distance=distance,
                    multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                )
            elif v.kind == "muvera":
                config[v.name] = models.VectorParams(size=self.muvera.dims, distance=models.Distance.DOT)
        return config

    def sparse_vectors_config(self) -> dict[str, models.SparseVectorParams]:
        modifier = models.Modifier.IDF if self.sparse_idf else None
        return {v.name: models.SparseVectorParams(modifier=modifier) for v in self.vectors if v.kind == "sparse"}

    # ---- encoding ----------------------------------------------------------
    def encode_options(self, wanted: Sequence[NamedVector], is_query: bool, progress: bool | None) -> dict[str, Any]:
        kinds = list(dict.fromkeys(v.kind for v in wanted))
        muvera = {name: getattr(self.muvera, name) for name in self.muvera.__struct_fields__}
        return dict(output_types=kinds, is_query=is_query, muvera=muvera if "muvera" in kinds else None,
                    instruction=self.instruction if is_query else None, batch_size=self.batch_size,
                    progress=self.progress if progress is None else progress)

    def encode_calls(self, texts: str | Sequence[str | None] | None, images: Sequence[Any] | None, is_query: bool,
                     progress: bool | None = None) -> tuple[int, list[tuple[str, list, list[int], list, dict]]]:
        """(rows, [(model, items, row positions, vectors, options)]): the SIE calls that vectorise
        points or queries (see sie_client.image_inputs.encode_groups); a point without a text
        or image simply lacks the vectors it would feed, as Qdrant allows."""
        texts = [texts] if isinstance(texts, str) else texts
        rows, groups = encode_groups(self.vectors, texts, images, is_query=is_query, image_model=self.image_model)
        return rows, [(model, items, where, wanted, self.encode_options(wanted, is_query, progress))
                      for model, items, where, wanted in groups]

    @staticmethod
    def fill_rows(rows: list[dict[str, Any]], wanted: Sequence[NamedVector], result: EncodeResult,
                  where: Sequence[int] | None = None) -> None:
        """Put each encoded item's vectors into its row (`where`: the rows the items belong to)."""
        for i, item in zip(range(len(rows)) if where is None else where, result.items):
            for v in wanted:
                rows[i][v.name] = qdrant_vector(v.kind, item)

    # ---- points ------------------------------------------------------------
    @staticmethod
    def check_lengths(texts: Sequence[str | None] | None, ids: Sequence[Any] | None,
                      payloads: Sequence[Mapping[str, Any]] | None, images: Sequence[Any] | None = None) -> list:
        lengths = {len(values) for values in (texts, images, payloads) if values is not None}
        if not lengths:
            raise ValueError("give texts, images or both")
        count = lengths.pop()
        ids = list(ids) if ids is not None else list(range(count))
        if lengths or len(ids) != count:
            raise ValueError("texts, images, ids and payloads must have the same length")
        return ids

    @staticmethod
    def build_points(texts: Sequence[str | None] | None, ids: Sequence[Any],
                     payloads: Sequence[Mapping[str, Any]] | None, text_field: str,
                     rows: Sequence[dict[str, Any]]) -> list[models.PointStruct]:
        """PointStructs with their named vectors; the text is kept in the payload under `text_field`
        (for reranking), and an id that is not an int or UUID under `id`."""
        points = []
        for i, vectors in enumerate(rows):
            payload = dict(payloads[i]) if payloads is not None else {}
            if texts is not None and texts[i] is not None:
                payload.setdefault(text_field, texts[i])
            pid = point_id(ids[i])
            if pid != ids[i]:
                payload.setdefault("id", ids[i])
            points.append(models.PointStruct(id=pid, vector=vectors, payload=payload))
        return points

    # ---- queries -----------------------------------------------------------
    def using(self, using: str | None) -> str:
        if using is None:
            return self.vectors[0].name
        if using not in {v.name for v in self.vectors}:
            raise ValueError(f"unknown vector {using!r}; this helper has {[v.name for v in self.vectors]}")
        return using

    def image_using(self, using: str | None) -> str:
        """The vector an image query searches: `using`, which must lie in the image space, or the image vector."""
        # An image's vector lies in its model's space: the image vector's, and that of any
        # dense text vector computed by the same model.
        space = [v.name for v in self.vectors if v.model == self.image_model and v.kind == "dense"]
        if not space:
            raise ValueError("image queries need image_model=... (an image-text model such as CLIP)")
        if using is None:
            return next(v.name for v in self.vectors if v.source == "image")
        if using not in space:
            raise ValueError(f"an image can query only vectors of the image model {self.image_model!r}: {space}; "
                             f"not {using!r}")
        return using

    def search_requests(self, rows: Sequence[dict[str, Any]], using: str | None, limit: int,
                        query_filter: models.Filter | None, with_payload: Any, **kwargs) -> list[models.QueryRequest]:
        name = self.using(using)
        return [models.QueryRequest(query=row[name], using=name, limit=limit, filter=query_filter,
                                    with_payload=with_payload, **kwargs) for row in rows]

    def fusion_query(self, fusion: models.Fusion, weights: Mapping[str, float] | None,
                     rrf_k: int | None, names: Sequence[str]) -> models.FusionQuery | models.RrfQuery:
        """Plain fusion, or parametrised RRF when `weights` (per vector name) or `rrf_k` is given."""
        if weights is None and rrf_k is None:
            return models.FusionQuery(fusion=fusion)
        if fusion != models.Fusion.RRF:
            raise ValueError("weights and rrf_k apply to fusion=RRF only")
        if weights is not None:
            unknown = set(weights) - set(names)
            if unknown:
                raise ValueError(f"weights for unknown vectors {sorted(unknown)}; the prefetches are {list(names)}")
        return models.RrfQuery(rrf=models.Rrf(
            k=rrf_k, weights=[float(weights.get(n, 1.0)) for n in names] if weights is not None else None))

    def hybrid_requests(self, rows: Sequence[dict[str, Any]], *, limit: int, prefetch_limit: int,
                        fusion: models.Fusion, weights: Mapping[str, float] | None, rrf_k: int | None,
                        query_filter: models.Filter | None) -> list[models.QueryRequest]:
        """Prefetch from every named vector, fused in Qdrant."""
        names = [v.name for v in self.vectors]
        query = self.fusion_query(fusion, weights, rrf_k, names)
        return [
            models.QueryRequest(
                prefetch=[models.Prefetch(query=row[name], using=name, limit=prefetch_limit, filter=query_filter)
                          for name in names],
                query=query, limit=limit, with_payload=True,
            )
            for row in rows
        ]

    def multistage_requests(self, rows: Sequence[dict[str, Any]], *, limit: int, prefetch_limit: int,
                            query_filter: models.Filter | None) -> list[models.QueryRequest]:
        """Dense, sparse and MUVERA vectors find candidates (`prefetch_limit` each); the multivector
        rescores their union with MaxSim (Qdrant's recommended use of late interaction:
        token vectors are costly to search, cheap to compare against a few hundred points)."""
        rescorer = self.vector("multivector")
        first = [v for v in self.vectors if v.kind in FIRST_STAGE]
        if rescorer is None or not first:
            raise ValueError("a multi-stage query needs multivector_model and a dense_model, sparse_model or "
                             "muvera_model")
        return [
            models.QueryRequest(
                prefetch=[models.Prefetch(query=row[v.name], using=v.name, limit=prefetch_limit, filter=query_filter)
                          for v in first],
                query=row[rescorer.name], using=rescorer.name, limit=limit, with_payload=True,
            )
            for row in rows
        ]

    # ---- reranking ---------------------------------------------------------
    def required_rerank_model(self) -> str:
        if self.rerank_model is None:
            raise ValueError("rerank needs a rerank_model")
        return self.rerank_model

    def rerank_texts(self, points: Sequence[models.ScoredPoint], text_field: str) -> list[str]:
        self.required_rerank_model()
        texts = []
        for p in points:
            if not p.payload or text_field not in p.payload:
                raise ValueError(f"point {p.id} has no {text_field!r} payload to rerank on; store texts with upsert()")
            texts.append(p.payload[text_field])
        return texts

    @staticmethod
    def reorder(points: Sequence[models.ScoredPoint], scored) -> list[models.ScoredPoint]:
        """Points in the SIE score model's order; each point's score becomes the model's score."""
        return [points[s.index].model_copy(update={"score": s.score}) for s in scored.scores]

    def wants_rerank(self, rerank: bool | None) -> bool:
        if rerank and self.rerank_model is None:
            raise ValueError("rerank=True needs rerank_model=...")
        return self.rerank_model is not None if rerank is None else rerank
