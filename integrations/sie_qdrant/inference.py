"""qdrant-client's own inference objects embedded by SIE: `models.Document(text=..., model="sie/<id>")`
and `models.Image(image=..., model="sie/<id>")` in `upsert`, `upload_points`, `query_points`,
`query_batch_points`, prefetches and the rest of qdrant-client's calls.

qdrant-client looks through every request for inference objects before sending it (its
`Inspector`) and, unless `cloud_inference=True`, hands them to the client's `ModelEmbedder`,
whose `Embedder` turns each model's batch into vectors (FastEmbed's, by default;
qdrant_client/embed/model_embedder.py and embedder.py, qdrant-client 1.20). `use_sie(qdrant, ...)`
gives the client an embedder that sends the models named with the `sie/` prefix to SIE, one
encode call per model, input kind and options (queries in SIE's query mode, as qdrant-client
asks for `query_points`), and leaves every other model to FastEmbed as before.

A Document's `options` are SIE's encode fields: `output_type` (`dense`, `sparse`, `multivector` or,
for a multi-vector model, `muvera`; default: the model's first output), `dims`, `instruction`,
`normalize`, `truncate`, `muvera` (the MUVERA parameters: FastEmbed's k_sim, dim_proj, r_reps,
random_seed). An Image's
`image` is a local path, bytes or a PIL image (as SIE's other adapters take them; URLs are refused,
not fetched). Works for `QdrantClient` (local `:memory:` or a server) and `AsyncQdrantClient`,
whose inference runs in the calling thread as qdrant-client's own does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from qdrant_client.embed.embedder import Embedder
from qdrant_client.embed.model_embedder import ModelEmbedder
from qdrant_client.http import models

from sie_client import SIEClient
from sie_client.image_inputs import image_items

PREFIX = "sie/"
OPTIONS = ("output_type", "dims", "instruction", "normalize", "truncate", "muvera")


def _vector(item: Any, kind: str) -> Any:
    """One SIE encoded item -> the vector qdrant-client sends for that output."""
    if kind == "sparse":
        return models.SparseVector(indices=item.sparse.indices.astype(int).tolist(),
                                   values=item.sparse.values.astype(float).tolist())
    value = getattr(item, kind)
    if value is None:
        raise ValueError(f"SIE answered no {kind} output")
    return value.astype(float).tolist()


class SIEEmbedder(Embedder):
    """qdrant-client's `Embedder` with the models named `<prefix><SIE model id>` served by SIE;
    the others go to `fallback` (qdrant-client's FastEmbed embedder)."""

    def __init__(self, sie: SIEClient, fallback: Embedder, prefix: str = PREFIX):
        super().__init__(use_core_bm25=getattr(fallback, "_use_core_bm25", False))
        self.sie, self.fallback, self.prefix = sie, fallback, prefix
        self._outputs: dict[str, tuple[str, ...]] = {}
        self._modalities: dict[str, tuple[str, ...]] = {}

    def _sie_model(self, model_name: str) -> str | None:
        return model_name[len(self.prefix):] if model_name.startswith(self.prefix) else None

    def _describe(self, model: str) -> None:
        if model not in self._outputs:
            info = self.sie.model(model)  # 404 for a model the server does not serve
            outputs = tuple(o for o in info.outputs if o in ("dense", "sparse", "multivector"))
            self._outputs[model] = (*outputs, "muvera") if "multivector" in outputs else outputs
            self._modalities[model] = tuple(info.modalities)

    # qdrant-client asks these before embedding (and refuses a model all of them deny). They are
    # classmethods on Embedder; here they depend on the instance's prefix and fallback.
    def is_supported_text_model(self, model_name: str) -> bool:  # type: ignore[override]
        return self._sie_model(model_name) is not None or self.fallback.is_supported_text_model(model_name)

    def is_supported_image_model(self, model_name: str) -> bool:  # type: ignore[override]
        model = self._sie_model(model_name)
        if model is None:
            return self.fallback.is_supported_image_model(model_name)
        self._describe(model)
        return "image" in self._modalities[model]

    def is_supported_sparse_model(self, model_name: str) -> bool:
        return self._sie_model(model_name) is None and self.fallback.is_supported_sparse_model(model_name)

    def is_supported_late_interaction_text_model(self, model_name: str) -> bool:  # type: ignore[override]
        return self._sie_model(model_name) is None and self.fallback.is_supported_late_interaction_text_model(
            model_name)

    def is_supported_late_interaction_multimodal_model(self, model_name: str) -> bool:  # type: ignore[override]
        return self._sie_model(model_name) is None and \
            self.fallback.is_supported_late_interaction_multimodal_model(model_name)

    def embed(self, model_name: str, texts: list[str] | None = None, images: list[Any] | None = None,
              options: dict[str, Any] | None = None, is_query: bool = False, batch_size: int = 8) -> Any:
        model = self._sie_model(model_name)
        if model is None:
            return self.fallback.embed(model_name=model_name, texts=texts, images=images, options=options,
                                       is_query=is_query, batch_size=batch_size)
        options = dict(options or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"{model_name}: unknown options {unknown}; SIE takes {', '.join(OPTIONS)}")
        self._describe(model)
        kind = options.pop("output_type", None) or (self._outputs[model] or ("dense",))[0]
        if kind not in self._outputs[model]:
            raise ValueError(f"{model_name} has no {kind!r} output; it offers {', '.join(self._outputs[model])}")
        items: list[Any] = list(texts) if texts is not None else image_items(list(images or ()))
        result = self.sie.encode(model, items, output_types=[kind], is_query=is_query,
                                 instruction=options.get("instruction") if is_query else None,
                                 dims=options.get("dims"), normalize=options.get("normalize"),
                                 truncate=options.get("truncate"), muvera=options.get("muvera"))
        return [_vector(item, kind) for item in result.items]


class SIEModelEmbedder(ModelEmbedder):
    """qdrant-client's `ModelEmbedder` over an `SIEEmbedder`."""

    def __init__(self, original: ModelEmbedder, sie: SIEClient, prefix: str = PREFIX):
        super().__init__(parser=original._embed_inspector.parser)
        self.embedder = SIEEmbedder(sie, original.embedder, prefix)
        # In local mode qdrant-client asks for FastEmbed before embedding anything; SIE embeds here,
        # and a model neither SIE nor FastEmbed serves is still refused by name before any call.
        self._is_builtin_embedder_available = True

    def embed_models_strict(self, raw_models: Iterable[dict[str, Any] | Any], batch_size: int = 8,
                            parallel: int | None = None) -> Iterable[Any]:
        # `parallel` would embed in worker processes that build qdrant-client's own embedder (no
        # SIE); SIE batches and parallelises on the server, so this process sends the batches.
        return super().embed_models_strict(raw_models, batch_size=batch_size, parallel=None)


def use_sie(qdrant: Any, url: str | None = None, *, api_key: str | None = None, timeout: float | None = None,
            client: SIEClient | None = None, prefix: str = PREFIX) -> Any:
    """Make `qdrant` (a QdrantClient or AsyncQdrantClient) embed the inference objects whose model
    is `<prefix><SIE model id>` through SIE at `url` (or `client`). Returns `qdrant`.

    Example:
        qdrant = use_sie(QdrantClient(":memory:"), "http://127.0.0.1:8080")
        qdrant.upsert("docs", [models.PointStruct(id=1, vector=models.Document(
            text="Mounting disks with udisks", model="sie/BAAI/bge-small-en-v1.5"))])
        qdrant.query_points("docs", query=models.Document(text="mount a USB disk",
                                                           model="sie/BAAI/bge-small-en-v1.5"))
    """
    original = getattr(qdrant, "_model_embedder", None)
    if not isinstance(original, ModelEmbedder):
        raise TypeError(f"{type(qdrant).__name__} has no qdrant-client model embedder to hook SIE into "
                        "(use_sie takes a QdrantClient or AsyncQdrantClient, qdrant-client 1.10 or newer)")
    if getattr(qdrant, "cloud_inference", False):
        raise ValueError("this client sends inference objects to Qdrant Cloud (cloud_inference=True); "
                         "make it with cloud_inference=False to embed them through SIE")
    if isinstance(original, SIEModelEmbedder):
        original = ModelEmbedder(parser=original._embed_inspector.parser)  # re-pointing: drop the old hook
    sie = client or SIEClient(url, api_key=api_key, **({"timeout": timeout} if timeout is not None else {}))
    qdrant._model_embedder = SIEModelEmbedder(original, sie, prefix)
    return qdrant
