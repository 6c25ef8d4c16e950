"""The compatibility APIs' routes, declared once: OpenAI's embeddings, TEI, Cohere/Jina rerank,
Weaviate's modules, Infinity, Cohere's embed v2, Hugging Face's classification tasks.

Each `CompatApi` says where its handlers live (a module, imported by the engine server only),
how a request names its model (in the path, under the API's prefix, or in the JSON body) and
its routes: method, path, the handler's name in that module and the route's name (the names of
POST routes are the work routes: counted in flight, refused while draining). The server mounts
these rows (`compat.mount_api`); the router (router/app.py) mounts the same rows, routing by the
model they name. A new compat API is its handler module and one entry in `APIS`.

This module imports nothing but the standard library: the router reads it without the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# A route's model id: the rest of the path, whatever it holds (`.` without DOTALL stops at a
# newline, and an id with `%0A` then got "no such route" instead of the route's own 404).
MODEL_MATCH = "{model:(?s:.+)}"


@dataclass(frozen=True)
class Route:
    method: str  # "POST" or "GET"
    path: str  # under the API's prefix ("" : the prefix itself)
    handler: str  # the handler's name in the API's module
    name: str  # the aiohttp route name


@dataclass(frozen=True)
class CompatApi:
    name: str
    module: str  # the module (under sie_server) whose functions handle the routes
    model: Literal["path", "body"]  # where a request names its model
    routes: tuple[Route, ...]
    # "/tei/" + MODEL_MATCH when the model is in the path: the route's `model` match (a model id
    # contains a slash, so the routes after it must be matched first: the root route comes last)
    prefix: str = ""

    def paths(self) -> tuple[tuple[str, str, str, str], ...]:
        """(method, full path, handler name, route name) per route, in the order they are matched."""
        return tuple((r.method, self.prefix + r.path, r.handler, r.name) for r in self.routes)

    @property
    def work(self) -> frozenset[str]:
        """The names of the routes that run models (their POSTs)."""
        return frozenset(r.name for r in self.routes if r.method == "POST")


OPENAI = CompatApi("openai", "openai_compat", "body", (Route("POST", "/v1/embeddings", "embeddings", "embeddings"),))

TEI = CompatApi("tei", "compat_tei", "path", prefix="/tei/" + MODEL_MATCH, routes=(
    Route("POST", "/embed", "embed", "tei_embed"),
    Route("POST", "/embed_sparse", "embed_sparse", "tei_embed_sparse"),
    Route("POST", "/embed_all", "embed_all", "tei_embed_all"),
    Route("POST", "/rerank", "rerank", "tei_rerank"),
    Route("POST", "/predict", "predict", "tei_predict"),
    Route("POST", "/similarity", "similarity", "tei_similarity"),
    Route("POST", "/tokenize", "tokenize", "tei_tokenize"),
    Route("POST", "/decode", "decode", "tei_decode"),
    # TEI's OpenAI route (the longer path first: a model id may hold slashes)
    Route("POST", "/v1/embeddings", "openai_embeddings", "tei_openai_embeddings"),
    Route("POST", "/embeddings", "openai_embeddings", "tei_openai_embeddings_short"),
    Route("GET", "/info", "info", "tei_info"),
    Route("GET", "/health", "health", "tei_health"),
    Route("POST", "", "root", "tei_root"),  # the root last: it matches any path under the prefix
    Route("GET", "", "health", "tei_root_health"),
))

RERANK = CompatApi("rerank", "compat_rerank", "body", (  # Cohere's v1 and v2, Jina's (v1's shape)
    Route("POST", "/v1/rerank", "rerank_v1", "cohere_rerank_v1"),
    Route("POST", "/v2/rerank", "rerank_v2", "cohere_rerank_v2"),
))

WEAVIATE = CompatApi("weaviate", "compat_weaviate", "path", prefix="/weaviate/" + MODEL_MATCH, routes=(
    Route("POST", "/vectors", "vectors", "weaviate_vectors"),
    Route("POST", "/vectors/", "vectors", "weaviate_vectors_slash"),
    Route("POST", "/rerank", "rerank", "weaviate_rerank"),
    Route("POST", "/vectorize", "vectorize", "weaviate_vectorize"),
    Route("GET", "/meta", "meta", "weaviate_meta"),
    Route("GET", "/.well-known/ready", "ready", "weaviate_ready"),
    Route("GET", "/.well-known/live", "live", "weaviate_live"),
))

INFINITY = CompatApi("infinity", "compat_infinity", "body", (
    Route("POST", "/embeddings", "embeddings", "infinity_embeddings"),
    Route("POST", "/rerank", "rerank", "infinity_rerank"),
    Route("POST", "/classify", "classify", "infinity_classify"),
    Route("GET", "/models", "models", "infinity_models"),
    Route("GET", "/health", "health", "infinity_health"),
))

COHERE = CompatApi("cohere", "compat_cohere", "body", (Route("POST", "/v2/embed", "embed", "cohere_embed_v2"),))

# Hugging Face's InferenceClient(base_url=...) posts every task to the base URL itself
HF = CompatApi("hf", "compat_hf", "path", prefix="/hf/" + MODEL_MATCH, routes=(Route("POST", "", "root", "hf_root"),))

APIS: tuple[CompatApi, ...] = (OPENAI, TEI, RERANK, WEAVIATE, INFINITY, COHERE, HF)
