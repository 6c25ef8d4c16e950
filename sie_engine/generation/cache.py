"""The running decode batch's KV cache: one row per running sequence (a beam is a row).

Per decoder layer: self-attention keys/values `[rows, heads, positions, head_dim]`, one position
written per generated token (a prompt's positions in its first step), and cross-attention
keys/values `[rows, heads, memory, head_dim]`, projected once from the encoder's states when the
sequence joins (a decoder-only model's rows have no memory: 0 positions). `heads` are the
key/value heads: under grouped-query attention `attend_self` repeats them for the query heads.
Buffers are allocated with spare rows and positions and grow by doubling, so a step writes in
place; a sequence leaving moves the last rows into its place (a copy of the rows moved, not of
the batch) and a beam taking over another's history copies that row's positions.

A step: `begin_step(q_lens)` (new tokens per row: 1 while decoding, the prompt's length when the
row joins), the model's layers call `attend_self` / `attend_cross`, then `end_step()`.
Queries are `[rows, heads, Q, head_dim]` with Q = max(q_lens): rows with fewer new tokens are
padded at the end, their padding never written to the cache and its outputs never read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class _Step:
    """What a step's layers share: its rows `lo..hi`, where the new keys/values go, the masks."""

    lo: int
    hi: int
    q_lens: list[int]
    kv_len: int  # positions attended: the longest row's history plus its new tokens
    write_rows: torch.Tensor  # [N]: (row, query) pairs of real (not padding) new tokens
    write_cols: torch.Tensor
    write_positions: torch.Tensor
    self_mask: torch.Tensor
    memory: int
    cross_mask: torch.Tensor | None


def _grown(buffer: torch.Tensor, rows: int, positions: int) -> torch.Tensor:
    """`buffer` `[R, h, P, d]` copied into one with at least `rows` rows and `positions` positions."""
    r, h, p, d = buffer.shape
    if rows <= r and positions <= p:
        return buffer
    new = buffer.new_zeros((max(rows, 2 * r if rows > r else r), h, max(positions, 2 * p if positions > p else p), d))
    new[:r, :, :p] = buffer
    return new


class DecodeCache:
    def __init__(self, layers: int, heads: int, head_dim: int, device: torch.device, dtype: torch.dtype):
        self.layers, self.heads, self.head_dim = layers, heads, head_dim
        self.device, self.dtype = device, dtype
        self.reset()

    def reset(self) -> None:
        """Drop every row and the buffers with them (the loop calls it when its batch empties, so an
        idle model holds no cache memory)."""
        empty = torch.zeros((0, self.heads, 0, self.head_dim), device=self.device, dtype=self.dtype)
        self.self_k = [empty] * self.layers
        self.self_v = [empty] * self.layers
        self.cross_k = [empty] * self.layers
        self.cross_v = [empty] * self.layers
        self.rows = 0
        self.lengths: list[int] = []  # positions held per row
        self.memory_lengths: list[int] = []  # encoder positions per row
        self._step: _Step | None = None

    # --- rows joining, moving and leaving (between steps) ---

    def add_rows(self, cross_kv: list[tuple[torch.Tensor, torch.Tensor]] | None, positions: int, m: int) -> range:
        """Append `m` rows whose cross-attention keys/values are `cross_kv` (per layer, `[m, heads, S, d]`
        each; None: rows without encoder memory, a decoder-only model's), with room for `positions`
        self-attention positions. Returns the new rows' indices."""
        n, s = self.rows, 0
        for i, (k, v) in enumerate(cross_kv or []):
            s = k.shape[2]
            assert k.shape[0] == m, "a row of cross-attention keys/values per new row"
            self.cross_k[i] = _grown(self.cross_k[i], n + m, s)
            self.cross_v[i] = _grown(self.cross_v[i], n + m, s)
            self.cross_k[i][n:n + m, :, :s] = k
            self.cross_v[i][n:n + m, :, :s] = v
        for i in range(self.layers):
            self.self_k[i] = _grown(self.self_k[i], n + m, positions)
            self.self_v[i] = _grown(self.self_v[i], n + m, positions)
        self.rows = n + m
        self.lengths += [0] * m
        self.memory_lengths += [s] * m
        return range(n, n + m)

    def copy_history(self, dst: list[int], src: list[int]) -> None:
        """Rows `dst` take the self-attention history of rows `src` (beams of one request: their
        memory is the same). All sources are read before any destination is written."""
        if not dst:
            return
        d, s = torch.tensor(dst, device=self.device), torch.tensor(src, device=self.device)
        used = max(self.lengths[i] for i in src)
        for i in range(self.layers):
            self.self_k[i][d, :, :used] = self.self_k[i][s, :, :used]
            self.self_v[i][d, :, :used] = self.self_v[i][s, :, :used]
        for a, b in zip(dst, src, strict=True):
            self.lengths[a] = self.lengths[b]

    def remove_rows(self, removed: set[int]) -> dict[int, int]:
        """Free `removed` rows at once: the last surviving rows move into the holes. Returns the
        moves (old row -> new row) so that owners of moved rows can follow them."""
        keep = self.rows - len(removed)
        holes = sorted(r for r in removed if r < keep)
        movers = [r for r in range(keep, self.rows) if r not in removed]
        if holes:
            d, s = torch.tensor(holes, device=self.device), torch.tensor(movers, device=self.device)
            used = max(self.lengths[r] for r in movers)
            mem = max(self.memory_lengths[r] for r in movers)
            for i in range(self.layers):
                self.self_k[i][d, :, :used] = self.self_k[i][s, :, :used]
                self.self_v[i][d, :, :used] = self.self_v[i][s, :, :used]
                if mem:  # rows without encoder memory (a decoder-only model's) have no cross buffers
                    self.cross_k[i][d, :, :mem] = self.cross_k[i][s, :, :mem]
                    self.cross_v[i][d, :, :mem] = self.cross_v[i][s, :, :mem]
            for a, b in zip(holes, movers, strict=True):
                self.lengths[a], self.memory_lengths[a] = self.lengths[b], self.memory_lengths[b]
        del self.lengths[keep:], self.memory_lengths[keep:]
        self.rows = keep
        return dict(zip(movers, holes, strict=True))

    def ensure_positions(self, positions: int) -> None:
        for i in range(self.layers):
            self.self_k[i] = _grown(self.self_k[i], self.rows, positions)
            self.self_v[i] = _grown(self.self_v[i], self.rows, positions)

    # --- one step ---

    def begin_step(self, q_lens: list[int], first_row: int = 0) -> torch.Tensor:
        """Start a step over rows `first_row .. first_row + len(q_lens)` with `q_lens[i]` new tokens for
        the i-th of them (the loop runs joining rows' prompts apart from the running rows' single
        tokens, so that no running row is padded to a prompt's length). Returns the new tokens'
        positions `[len(q_lens), Q]`."""
        lo, hi = first_row, first_row + len(q_lens)
        held = self.lengths[lo:hi]
        q = max(q_lens)
        positions = torch.tensor(held, device=self.device)[:, None] + torch.arange(q, device=self.device)
        kv_len = max(a + b for a, b in zip(held, q_lens, strict=True))
        self.ensure_positions(kv_len)
        valid = torch.arange(q, device=self.device)[None, :] < torch.tensor(q_lens, device=self.device)[:, None]
        write_rows, write_cols = valid.nonzero(as_tuple=True)
        memory = self.memory_lengths[lo:hi]
        cross_mask = None
        if min(memory) != max(memory):
            lengths = torch.tensor(memory, device=self.device)
            cross_mask = (torch.arange(max(memory), device=self.device)[None, :] < lengths[:, None])[:, None, None, :]
        self._step = _Step(lo=lo, hi=hi, q_lens=q_lens, kv_len=kv_len, write_rows=write_rows, write_cols=write_cols,
                           write_positions=positions[write_rows, write_cols],
                           self_mask=(torch.arange(kv_len, device=self.device)[None, None, :]
                                      <= positions[:, :, None])[:, None],  # [rows, 1, Q, kv_len]
                           memory=max(memory), cross_mask=cross_mask)
        self.last_index = torch.tensor(q_lens, device=self.device) - 1  # each row's last new token
        self.step_positions = positions
        return positions

    def attend_self(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None = None) -> torch.Tensor:
        """Causal self-attention of this step's queries over the row's history and its new tokens.
        q, k, v `[rows, heads, Q, d]` -> `[rows, heads, Q, d]`; k, v are written to the cache."""
        st = self._step
        assert st is not None
        keys, values = self.self_k[layer][st.lo:st.hi], self.self_v[layer][st.lo:st.hi]  # views: writes land
        keys[st.write_rows, :, st.write_positions] = k[st.write_rows, :, st.write_cols]
        values[st.write_rows, :, st.write_positions] = v[st.write_rows, :, st.write_cols]
        keys, values = keys[:, :, :st.kv_len], values[:, :, :st.kv_len]
        rows, heads, length, dim = q.shape
        kv_heads = keys.shape[1]
        if heads == kv_heads:
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=st.self_mask, scale=scale)
        # grouped-query attention: query head j reads key/value head j // group, so the group's queries
        # are stacked as one head's (`[rows, kv_heads, group * Q, d]`) over the cache as it is, instead
        # of repeating the keys and values per query head (a copy of the whole history per layer per
        # step: 3.8x the attention's time for 16 rows of 150 positions, 8 query heads over 4)
        group = heads // kv_heads
        mask = st.self_mask[:, :, None].expand(rows, 1, group, length, st.kv_len).reshape(rows, 1, group * length,
                                                                                           st.kv_len)
        out = F.scaled_dot_product_attention(q.reshape(rows, kv_heads, group * length, dim), keys, values,
                                             attn_mask=mask, scale=scale)
        return out.reshape(rows, heads, length, dim)

    def attend_cross(self, layer: int, q: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        """Attention of this step's queries `[rows, heads, Q, d]` over each row's encoder memory."""
        st = self._step
        assert st is not None
        return F.scaled_dot_product_attention(q, self.cross_k[layer][st.lo:st.hi, :, :st.memory],
                                              self.cross_v[layer][st.lo:st.hi, :, :st.memory],
                                              attn_mask=st.cross_mask, scale=scale)

    def end_step(self) -> None:
        st = self._step
        assert st is not None
        for i, added in enumerate(st.q_lens):
            self.lengths[st.lo + i] += added
        self._step = None

    def nbytes(self) -> int:
        """Bytes the cache's buffers hold now (the pool's charge for a model's decode state)."""
        return sum(t.numel() * t.element_size() for t in (*self.self_k, *self.self_v, *self.cross_k, *self.cross_v))
