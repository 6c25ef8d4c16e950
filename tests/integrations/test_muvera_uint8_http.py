"""The muvera output and uint8 over a real sie-server (the session's, with the tiny ColBERT):
JSON and msgpack bodies, the typed client, and the 400s for bad parameters. Each answer is
held to FastEmbed's `Muvera` over the multivector output of the same answer, and uint8 to
sentence-transformers' quantize_embeddings (per-vector range), as the engine tests do."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import msgpack
import numpy as np
import pytest

from integration_recall import COLBERT
from sie_client import SIEClient, SIEError

pytest.importorskip("fastembed")
from fastembed.postprocess.muvera import Muvera  # noqa: E402

DOCS = ["pip installs Python packages from PyPI", "a library for PNG images", "dpkg and apt manage packages"]
PARAMS = {"k_sim": 4, "dim_proj": 8, "r_reps": 3, "random_seed": 11}


def post(url: str, body: dict, fmt: str) -> tuple[int, dict]:
    kind = "application/msgpack" if fmt == "msgpack" else "application/json"
    data = msgpack.packb(body) if fmt == "msgpack" else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}/v1/encode/{COLBERT}", data=data, method="POST",
                                     headers={"Content-Type": kind, "Accept": kind})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, raw, got = answer.status, answer.read(), answer.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        status, raw, got = error.code, error.read(), error.headers["Content-Type"]
    return status, msgpack.unpackb(raw) if got.startswith("application/msgpack") else json.loads(raw)


def array(value, dtype=np.float32) -> np.ndarray:
    """A JSON list or a msgpack tensor object -> numpy."""
    if isinstance(value, dict):
        return np.frombuffer(value["data"], dtype=np.dtype(value["dtype"]).newbyteorder("<")).reshape(value["shape"])
    return np.asarray(value, dtype=dtype)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
def test_muvera_and_uint8_over_http(sie_url, fmt):
    reference = Muvera(16, **PARAMS)
    for is_query, encode in ((False, reference.process_document), (True, reference.process_query)):
        status, answer = post(sie_url, {"items": DOCS, "output_types": ["multivector", "muvera"],
                                        "muvera": PARAMS, "is_query": is_query}, fmt)
        assert status == 200, answer
        for item in answer["items"]:
            fde = array(item["muvera"])
            assert fde.shape == (reference.embedding_size,)
            np.testing.assert_allclose(fde, encode(array(item["multivector"])), rtol=1e-6, atol=1e-6)
    status, answer = post(sie_url, {"items": DOCS, "output_types": ["multivector", "muvera"],
                                    "output_dtype": "uint8"}, fmt)
    assert status == 200, answer
    floats = post(sie_url, {"items": DOCS, "output_types": ["multivector", "muvera"]}, fmt)[1]
    from sentence_transformers.util import quantize_embeddings

    for item, plain in zip(answer["items"], floats["items"]):
        if fmt == "msgpack":
            assert item["muvera"]["dtype"] == "uint8" and item["multivector"]["dtype"] == "uint8"
        for name in ("muvera", "multivector"):
            vectors = np.atleast_2d(array(plain[name]))
            ranges = [np.stack([np.full(v.size, v.min()), np.full(v.size, v.max())]) for v in vectors]
            expected = [quantize_embeddings(v[None], precision="uint8", ranges=r)[0] for v, r in zip(vectors, ranges)]
            np.testing.assert_array_equal(np.atleast_2d(array(item[name], np.uint8)), expected)


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize("body,message", [
    ({"output_types": ["muvera"], "muvera": {"dim_proj": 64}}, "wider than the model's token vectors (16)"),
    ({"output_types": ["muvera"], "muvera": {"k_sim": 0}}, "muvera.k_sim"),
    ({"output_types": ["muvera"], "muvera": {"r_reps": 64, "k_sim": 7, "dim_proj": 16}}, "at most 65536"),
    ({"output_types": ["muvera"], "muvera": {"dims": 4}}, "dims"),
    ({"output_types": ["muvera"], "muvera": [5]}, "muvera"),
    ({"muvera": {}}, "output_types ['muvera']"),
    ({"output_dtype": "uint4"}, "output_dtype"),
])
def test_bad_parameters_are_400s(sie_url, fmt, body, message):
    status, answer = post(sie_url, {"items": DOCS[:1], **body}, fmt)
    assert status == 400 and message in answer["error"]["message"], answer


def test_typed_client(sie_url):
    client = SIEClient(sie_url)
    both = client.encode(COLBERT, DOCS, output_types=["multivector", "muvera"], muvera=PARAMS).items
    reference = Muvera(16, **PARAMS)
    for item in both:
        np.testing.assert_allclose(item.muvera, reference.process_document(item.multivector), rtol=1e-6, atol=1e-6)
    quantised = client.encode(COLBERT, DOCS, output_types=["muvera"], output_dtype="uint8").items
    assert all(item.muvera.dtype == np.uint8 and item.muvera.shape == (10240,) for item in quantised)
    json_client = SIEClient(sie_url, encoding="json")
    again = json_client.encode(COLBERT, DOCS, output_types=["muvera"], output_dtype="uint8").items
    np.testing.assert_array_equal([i.muvera for i in again], [i.muvera for i in quantised])
    with pytest.raises(SIEError, match="dim_proj"):
        client.encode(COLBERT, DOCS, output_types=["muvera"], muvera={"dim_proj": 17})
