"""SIE's MUVERA encoder against FastEmbed's `Muvera` (fastembed.postprocess.muvera) on the
same random token vectors and parameters: query and document encodings, with and without
the random projection, through documents with empty partitions to fill (few tokens, many
partitions) and a one-token document. Tolerance: float32 rounding of float64 arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from sie_engine.muvera import muvera_encoder

pytest.importorskip("fastembed")
from fastembed.postprocess.muvera import Muvera  # noqa: E402

# (token width, k_sim, dim_proj, r_reps, random_seed): FastEmbed's defaults, a projection-free
# one (dim_proj == width: FastEmbed then keeps the partition means), a many-partition one
CASES = [(16, 5, 16, 20, 42), (128, 5, 16, 20, 42), (32, 4, 32, 3, 1), (24, 7, 8, 2, 2026)]


@pytest.mark.parametrize("width,k_sim,dim_proj,r_reps,seed", CASES)
def test_equal_to_fastembed(width, k_sim, dim_proj, r_reps, seed):
    reference = Muvera(width, k_sim, dim_proj, r_reps, seed)
    encoder = muvera_encoder(width, k_sim, dim_proj, r_reps, seed)
    assert encoder.dims == reference.embedding_size
    rng = np.random.default_rng(seed)
    for tokens in (1, 3, 40, 300):
        vectors = rng.normal(size=(tokens, width)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        for is_query, expected in ((True, reference.process_query(vectors)),
                                   (False, reference.process_document(vectors))):
            got = encoder.encode(vectors, is_query)
            assert got.dtype == np.float32 and got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_empty_partitions_are_filled_for_documents_only():
    encoder = muvera_encoder(16, 6, 16, 1, 0)  # 64 partitions, 2 tokens: nearly all empty
    vectors = np.random.default_rng(0).normal(size=(2, 16)).astype(np.float32)
    blocks = encoder.encode(vectors, is_query=False).reshape(64, 16)
    assert not (np.abs(blocks).sum(axis=1) == 0).any()  # every partition holds a token's vector
    assert (np.abs(encoder.encode(vectors, is_query=True).reshape(64, 16)).sum(axis=1) == 0).sum() >= 62


def test_refusals():
    with pytest.raises(ValueError, match="wider than"):
        muvera_encoder(16, 5, 32, 20, 42)
    with pytest.raises(ValueError, match="without vectors"):
        muvera_encoder(16, 5, 16, 20, 42).encode(np.zeros((0, 16), np.float32), False)
