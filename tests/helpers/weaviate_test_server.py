"""A small in-process server speaking the subset of Weaviate's REST and gRPC APIs
that weaviate-client v4 uses for SIE's adapter: connect checks (`/v1/meta`,
readiness, gRPC health), collection create/get/delete (`/v1/schema`), batch
import (gRPC `BatchObjects`) and queries (gRPC `Search`: fetch, near-vector on
dense or multi-vector named vectors, hybrid BM25 + vector with relative score
fusion, Equal / ContainsAny filters, returned properties, vectors and metadata).

No Weaviate server can run here (the embedded one downloads a binary), so the
adapter is tested with the real client classes against this server, and
against a real Weaviate when WEAVIATE_URL is set. The search is exact: cosine
distance for dense vectors, MaxSim (negated, as Weaviate does) for multi-vectors.
"""

from __future__ import annotations

import json
import math
import re
import socket
import struct
import threading
import uuid as uuidlib
from collections import Counter
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import numpy as np
from google.protobuf.json_format import MessageToDict
from weaviate.proto.v1 import base_pb2, batch_pb2, properties_pb2, search_get_pb2, weaviate_pb2_grpc

VERSION = "1.32.0"
Op = base_pb2.Filters


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unpack_vector(v: base_pb2.Vectors) -> np.ndarray:
    """Weaviate's wire format: float32 little-endian; multi-vectors lead with a uint16 dim."""
    if v.type == base_pb2.Vectors.VECTOR_TYPE_MULTI_FP32:
        dim = struct.unpack("<H", v.vector_bytes[:2])[0]
        return np.frombuffer(v.vector_bytes[2:], dtype="<f4").reshape(-1, dim).astype(np.float32)
    return np.frombuffer(v.vector_bytes, dtype="<f4").astype(np.float32)


def pack_vector(name: str, vector: np.ndarray) -> base_pb2.Vectors:
    if vector.ndim == 2:
        data = struct.pack("<H", vector.shape[1]) + vector.astype("<f4").tobytes()
        return base_pb2.Vectors(name=name, vector_bytes=data, type=base_pb2.Vectors.VECTOR_TYPE_MULTI_FP32)
    return base_pb2.Vectors(name=name, vector_bytes=vector.astype("<f4").tobytes(),
                            type=base_pb2.Vectors.VECTOR_TYPE_SINGLE_FP32)


def _tokens(text: str) -> list[str]:
    return re.findall(r"[0-9a-z]+", text.lower())


class Store:
    """Collections by name: schema (the REST class JSON) and objects {uuid: (props, vectors)}."""

    def __init__(self):
        self.lock = threading.Lock()
        self.schemas: dict[str, dict] = {}
        self.objects: dict[str, dict[str, tuple[dict, dict[str, np.ndarray]]]] = {}


class Rest(BaseHTTPRequestHandler):
    store: Store

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str):
        self._send(status, {"error": [{"message": message}]})

    def do_GET(self):
        path = self.path.split("?")[0].rstrip("/")
        if path == "/v1/meta":
            return self._send(200, {"hostname": "http://127.0.0.1", "version": VERSION, "modules": {}})
        if path in ("/v1/.well-known/ready", "/v1/.well-known/live"):
            return self._send(200)
        if path == "/v1/schema":
            return self._send(200, {"classes": list(self.store.schemas.values())})
        if path.startswith("/v1/schema/"):
            schema = self.store.schemas.get(path.split("/")[3])
            return self._send(200, schema) if schema else self._error(404, "class not found")
        if path == "/v1/nodes":
            node = {"name": "node1", "status": "HEALTHY", "version": VERSION, "shards": []}
            return self._send(200, {"nodes": [node]})
        return self._error(404, f"no route {path}")

    def do_POST(self):
        path = self.path.split("?")[0].rstrip("/")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if path == "/v1/schema":
            name = body["class"]
            with self.store.lock:
                if name in self.store.schemas:
                    return self._error(422, f"class name {name!r} already exists")
                self.store.schemas[name] = _with_defaults(body)
                self.store.objects[name] = {}
            return self._send(200, self.store.schemas[name])
        return self._error(404, f"no route {path}")

    def do_DELETE(self):
        path = self.path.split("?")[0].rstrip("/")
        if path.startswith("/v1/schema/"):
            name = path.split("/")[3]
            with self.store.lock:
                self.store.schemas.pop(name, None)
                self.store.objects.pop(name, None)
            return self._send(200)
        return self._error(404, f"no route {path}")


HNSW_DEFAULTS = {
    "skip": False, "cleanupIntervalSeconds": 300, "maxConnections": 32, "efConstruction": 128, "ef": -1,
    "dynamicEfMin": 100, "dynamicEfMax": 500, "dynamicEfFactor": 8, "vectorCacheMaxObjects": 1000000000000,
    "flatSearchCutoff": 40000, "distance": "cosine", "filterStrategy": "sweeping",
}


def _with_defaults(schema: dict) -> dict:
    """The class as Weaviate answers it: property index flags, tokenization and each named
    vector's HNSW settings filled in with Weaviate's defaults."""
    for vector in (schema.get("vectorConfig") or {}).values():
        vector.setdefault("vectorIndexType", "hnsw")
        config = vector.setdefault("vectorIndexConfig", {})
        for key, value in HNSW_DEFAULTS.items():
            config.setdefault(key, value)
        if (config.get("multivector") or {}).get("enabled"):
            config["multivector"].setdefault("aggregation", "maxSim")
    for prop in schema.get("properties") or []:
        text = prop["dataType"][0] in ("text", "text[]")
        prop.setdefault("indexFilterable", True)
        prop.setdefault("indexSearchable", text)
        prop.setdefault("indexRangeFilters", False)
        if text:
            prop.setdefault("tokenization", "word")
    return schema


def _value(v) -> properties_pb2.Value:
    if isinstance(v, bool):
        return properties_pb2.Value(bool_value=v)
    if isinstance(v, int):
        return properties_pb2.Value(int_value=v)
    if isinstance(v, float):
        return properties_pb2.Value(number_value=v)
    if isinstance(v, list):
        texts = properties_pb2.TextValues(values=[str(x) for x in v])
        return properties_pb2.Value(list_value=properties_pb2.ListValue(text_values=texts))
    return properties_pb2.Value(text_value=str(v))


class Grpc(weaviate_pb2_grpc.WeaviateServicer):
    def __init__(self, store: Store):
        self.store = store

    def BatchObjects(self, request, context):
        errors = []
        with self.store.lock:
            for index, obj in enumerate(request.objects):
                if obj.collection not in self.store.objects:
                    errors.append(batch_pb2.BatchObjectsReply.BatchError(
                        index=index, error=f"no collection {obj.collection}"))
                    continue
                props = MessageToDict(obj.properties.non_ref_properties) if obj.HasField("properties") else {}
                for array in obj.properties.text_array_properties:
                    props[array.prop_name] = list(array.values)
                for name in obj.properties.empty_list_props:
                    props[name] = []
                vectors = {v.name: unpack_vector(v) for v in obj.vectors}
                self.store.objects[obj.collection][obj.uuid or str(uuidlib.uuid4())] = (props, vectors)
        return batch_pb2.BatchObjectsReply(took=0.0, errors=errors)

    def Search(self, request, context):
        with self.store.lock:
            if request.collection not in self.store.objects:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no collection {request.collection}")
            objects = [(u, p, v) for u, (p, v) in self.store.objects[request.collection].items()]
        objects = [o for o in objects if not request.HasField("filters") or self._match(request.filters, o[1])]
        scored: list[tuple[str, dict, dict, float | None, float | None]]
        if request.HasField("near_vector"):
            name, query = self._query_vector(request.near_vector)
            # An object without this named vector is not in its index (as in Weaviate): never found by it.
            scored = sorted(((u, p, v, self._distance(v[name], query), None) for u, p, v in objects if name in v),
                            key=lambda x: x[3])
        elif request.HasField("hybrid_search"):
            scored = self._hybrid(request.hybrid_search, objects)
        else:  # fetch: uuid order, after the cursor (collection.iterator pages with `after`)
            scored = [(u, p, v, None, None) for u, p, v in sorted(objects, key=lambda o: o[0])
                      if not request.after or u > request.after]
        limit = request.limit or 10
        results = []
        for u, props, vectors, distance, score in scored[:limit]:
            metadata = search_get_pb2.MetadataResult(id=u, id_as_bytes=uuidlib.UUID(u).bytes)
            if distance is not None:
                metadata.distance, metadata.distance_present = distance, True
            if score is not None:
                metadata.score, metadata.score_present = score, True
            wanted = list(request.metadata.vectors) if request.HasField("metadata") else []
            if request.HasField("metadata") and request.metadata.vector and not wanted:
                wanted = list(vectors)  # include_vector=True: every named vector
            for name in wanted:
                metadata.vectors.append(pack_vector(name, vectors[name]))
            properties = search_get_pb2.PropertiesResult(
                non_ref_props=properties_pb2.Properties(fields={k: _value(v) for k, v in props.items()}))
            results.append(search_get_pb2.SearchResult(metadata=metadata, properties=properties))
        return search_get_pb2.SearchReply(took=0.0, results=results)

    # ---- search parts ------------------------------------------------------
    @staticmethod
    def _query_vector(near: base_search_pb2.NearVector) -> tuple[str, np.ndarray]:  # noqa: F821
        for target in near.vector_for_targets:
            if target.vectors:
                return target.name, unpack_vector(target.vectors[0])
            return target.name, np.frombuffer(target.vector_bytes, "<f4")
        name = (list(near.targets.target_vectors) or list(near.target_vectors) or ["default"])[0]
        if near.vectors:
            return name, unpack_vector(near.vectors[0])
        return name, np.frombuffer(near.vector_bytes, dtype="<f4").astype(np.float32)

    @staticmethod
    def _distance(stored: np.ndarray, query: np.ndarray) -> float:
        if query.ndim == 2:  # MaxSim, negated so that smaller is closer (Weaviate's multi-vector distance)
            return -float((query @ stored.T).max(axis=1).sum())
        return float(1.0 - stored @ query / (np.linalg.norm(stored) * np.linalg.norm(query)))

    def _hybrid(self, hybrid, objects):
        """Relative score fusion: min-max normalise BM25 and vector similarity, weigh by alpha."""
        if hybrid.HasField("near_vector"):
            name, query = self._query_vector(hybrid.near_vector)
        else:
            name = (list(hybrid.targets.target_vectors) or list(hybrid.target_vectors))[0]
            query = np.frombuffer(hybrid.vector_bytes, dtype="<f4").astype(np.float32)
        similarity = np.array([-self._distance(v[name], query) for _, _, v in objects])
        keyword = self._bm25(hybrid.query, [p for _, p, _ in objects], list(hybrid.properties))
        # Newer clients send alpha_param (so 0 can be told from unset); 4.16's proto has alpha only.
        newer = "use_alpha_param" in hybrid.DESCRIPTOR.fields_by_name and hybrid.use_alpha_param
        alpha = hybrid.alpha_param if newer else hybrid.alpha

        def norm(x):
            span = x.max() - x.min() if len(x) else 0.0
            return (x - x.min()) / span if span > 0 else np.zeros_like(x)

        fused = alpha * norm(similarity) + (1 - alpha) * norm(keyword)
        order = np.argsort(-fused, kind="stable")
        return [(objects[i][0], objects[i][1], objects[i][2], None, float(fused[i])) for i in order]

    @staticmethod
    def _bm25(query: str, props: list[dict], fields: list[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
        def text_of(p: dict) -> str:
            return " ".join(str(p.get(f, "")) for f in (fields or [k for k, v in p.items() if isinstance(v, str)]))

        docs = [_tokens(text_of(p)) for p in props]
        n = len(docs)
        avg = sum(map(len, docs)) / max(n, 1)
        df = Counter(t for d in docs for t in set(d))
        scores = np.zeros(n)
        for term in set(_tokens(query)):
            if term not in df:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            for i, d in enumerate(docs):
                tf = d.count(term)
                if tf:
                    scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avg))
        return scores

    def _match(self, f, props: dict) -> bool:
        if f.operator == Op.OPERATOR_AND:
            return all(self._match(x, props) for x in f.filters)
        if f.operator == Op.OPERATOR_OR:
            return any(self._match(x, props) for x in f.filters)
        name = f.target.property if f.HasField("target") else f.on[0]
        value = props.get(name)
        values = value if isinstance(value, list) else [value]
        if f.operator == Op.OPERATOR_EQUAL:
            return f.value_text in values
        if f.operator == Op.OPERATOR_CONTAINS_ANY:
            return any(v in values for v in f.value_text_array.values)
        if f.operator == Op.OPERATOR_CONTAINS_ALL:
            return all(v in values for v in f.value_text_array.values)
        raise NotImplementedError(f"filter operator {Op.Operator.Name(f.operator)} "
                                  f"is outside this test server's subset")


# HealthCheckResponse(status=SERVING): field 1, varint 1. The bytes are the same in
# grpc.health.v1's message (weaviate-client 4.16 to 4.2x) and Weaviate's own copy of it
# (newer clients), so every client version from the floor up reads them.
_SERVING = b"\x08\x01"


class _Health(grpc.GenericRpcHandler):
    """`/grpc.health.v1.Health/Check`, as the client calls it on connect."""

    def service(self, handler_call_details):
        if handler_call_details.method != "/grpc.health.v1.Health/Check":
            return None
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: _SERVING, request_deserializer=bytes, response_serializer=bytes)


class WeaviateTestServer:
    """Start with `with WeaviateTestServer() as server:`; `server.http_port`, `server.grpc_port`."""

    def __init__(self):
        self.store = Store()
        self.http_port = _free_port()
        handler = type("Handler", (Rest,), {"store": self.store})
        self._http = ThreadingHTTPServer(("127.0.0.1", self.http_port), handler)
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                 options=[("grpc.max_receive_message_length", 64 << 20),
                                          ("grpc.max_send_message_length", 64 << 20)])
        weaviate_pb2_grpc.add_WeaviateServicer_to_server(Grpc(self.store), self._grpc)
        self._grpc.add_generic_rpc_handlers([_Health()])
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")

    def __enter__(self) -> WeaviateTestServer:
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self._grpc.start()
        return self

    def __exit__(self, *exc) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(grace=None)
