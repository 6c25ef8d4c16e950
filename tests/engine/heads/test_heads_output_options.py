"""Encode output options on the real default model, against sentence-transformers:
`dims` (Matryoshka truncation + renormalisation, as `truncate_dim`), `output_dtype`
float16 / int8 (with its scale) / uint8 (as `quantize_embeddings(..., "uint8")` with each
vector's own range) / binary (as `quantize_embeddings(..., "ubinary")`)."""

from __future__ import annotations

import numpy as np
import pytest

from sie_engine import Engine
from sie_engine.errors import InvalidRequest
from sie_engine.postprocess import Quantized, convert_dtype, truncate_and_normalize, unpack_binary
from tiny_models import MINILM_DIR

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = ["The Debian package manager", "a library for PNG images", "x", "install python packages with pip " * 5]


@pytest.fixture(scope="module")
def engine():
    with Engine(device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(MINILM_DIR), device="cpu")


def _dense(engine, **options) -> list:
    return [item.dense for item in engine.encode_sync(MODEL, TEXTS, **options).items]


@pytest.mark.parametrize("dims", [64, 128, 384])
def test_dims_truncates_and_renormalises_like_truncate_dim(engine, st_model, dims):
    expected = st_model.encode(TEXTS, normalize_embeddings=True, truncate_dim=dims)  # truncate, then normalise
    got = np.stack(_dense(engine, dims=dims))
    assert got.shape == (len(TEXTS), dims) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    raw = np.stack(_dense(engine, dims=dims, normalize=False))  # plain truncation of the pooled vector
    from sentence_transformers import SentenceTransformer

    pooled_only = SentenceTransformer(modules=[st_model[0], st_model[1]], device="cpu")  # no Normalize module
    np.testing.assert_allclose(raw, pooled_only.encode(TEXTS)[:, :dims], atol=1e-5)


def test_sparse_labels_without_a_sparse_output_is_refused(engine):
    with pytest.raises(InvalidRequest, match="output_types"):
        engine.encode_sync(MODEL, TEXTS, sparse_labels=True)


def test_float16(engine):
    full, half = _dense(engine), _dense(engine, output_dtype="float16")
    for a, b in zip(full, half):
        assert b.dtype == np.float16
        np.testing.assert_array_equal(b, a.astype(np.float16))


def test_int8_carries_its_scale(engine):
    full, quantized = _dense(engine), _dense(engine, output_dtype="int8", dims=128)
    for a, q in zip(full, quantized):
        assert isinstance(q, Quantized) and q.data.dtype == np.int8 and q.data.shape == (128,)
        truncated = truncate_and_normalize(a[None, :128], None, True)[0]
        assert np.abs(q.data).max() == 127  # the peak uses the whole range
        assert np.abs(q.dequantize() - truncated).max() <= q.scale / 2 + 1e-7
        assert abs(q.scale - np.abs(truncated).max() / 127) < 1e-9


def test_binary_matches_sentence_transformers_ubinary(engine, st_model):
    from sentence_transformers.util import quantize_embeddings

    for dims in (384, 100):
        bits = np.stack(_dense(engine, output_dtype="binary", dims=dims))
        expected = quantize_embeddings(st_model.encode(TEXTS, normalize_embeddings=True, truncate_dim=dims),
                                       precision="ubinary")
        assert bits.dtype == np.uint8 and bits.shape == (len(TEXTS), (dims + 7) // 8)
        np.testing.assert_array_equal(bits, expected)
        signs = unpack_binary(bits, dims)
        np.testing.assert_array_equal(signs, (np.stack(_dense(engine, dims=dims)) > 0).astype(np.uint8))


def test_int8_of_zeros_and_matrices():
    zero = convert_dtype(np.zeros(8, dtype=np.float32), "int8")
    assert zero.scale == 1.0 and not zero.data.any()
    matrix = np.random.default_rng(0).normal(size=(5, 16)).astype(np.float32)
    q = convert_dtype(matrix, "int8")
    assert q.data.shape == (5, 16) and np.abs(q.dequantize() - matrix).max() <= q.scale / 2 + 1e-6


@pytest.mark.parametrize("options, field", [
    ({"dims": 0}, "dims"), ({"dims": 385}, "dims"), ({"dims": 1.5}, "dims"), ({"dims": True}, "dims"),
    ({"output_dtype": "int4"}, "output_dtype"),
])
def test_bad_options_are_refused(engine, options, field):
    with pytest.raises(InvalidRequest) as info:
        engine.encode_sync(MODEL, TEXTS[:1], **options)
    assert info.value.field == field


def test_uint8_matches_sentence_transformers_with_each_vectors_range(engine, st_model):
    from sentence_transformers.util import quantize_embeddings

    for dims in (384, 100):
        got = np.stack(_dense(engine, output_dtype="uint8", dims=dims))
        floats = st_model.encode(TEXTS, normalize_embeddings=True, truncate_dim=dims)
        assert got.dtype == np.uint8 and got.shape == (len(TEXTS), dims)
        for row, vector in zip(got, floats):
            ranges = np.stack([np.full(dims, vector.min()), np.full(dims, vector.max())])
            np.testing.assert_array_equal(row, quantize_embeddings(vector[None], precision="uint8", ranges=ranges)[0])
        assert (got.min(axis=1) == 0).all() and (got.max(axis=1) >= 254).all()  # each vector spans the range
