"""The running decode batch's KV cache: one row per running sequence (a beam is a row).

Per decoder layer: self-attention keys/values `[rows, heads, positions, head_dim]`, one position
written per generated token (a prompt's positions in its first step), and cross-attention
keys/values `[rows, heads, memory, head_dim]`, projected once from the encoder's states when the
sequence joins (a decoder-only model's rows have no memory: 0 positions). `heads` are the
key/value heads: under grouped-query attention `attend_self` reads each for its group of query heads.
Buffers are allocated with spare rows and positions and grow by doubling, so a step writes in
place; a sequence leaving moves the last rows into its place (a copy of the rows moved, not of
the batch) and a beam taking over another's history copies that row's positions.

A step: `begin_step(q_lens)` (new tokens per row: 1 while decoding, the prompt's length when the
row joins), the model's layers call `attend_self` / `attend_cross`, then `end_step()`.
A step's new tokens are packed, every row's after the one before, as one sequence of T =
sum(q_lens) tokens: the model's layers see `[1, T, ...]`, so its linear layers run once over all
rows, running and joining alike, and no row is padded to another's length. Only attention needs
the rows apart: the cache splits the packed queries into parts of consecutive rows with equal
q_len (the running rows' single tokens, each group of prompts of one length), each part attending
as `[rows, heads, q_len, head_dim]` over its rows' histories.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class _Part:
    """Consecutive rows `lo..hi` of a step with `q_len` new tokens each: tokens `start..end` of the
    packed step, where their new keys/values go, their masks."""

    lo: int
    hi: int
    q_len: int
    start: int
    kv_len: int  # positions attended: the longest row's history plus its new tokens
    write_rows: torch.Tensor  # [(hi - lo) * q_len]: each new token's row (within the part), index
    write_cols: torch.Tensor  # among the row's new tokens, and position
    write_positions: torch.Tensor
    self_mask: torch.Tensor  # [rows, 1, q_len, kv_len]
    memory: int
    cross_mask: torch.Tensor | None

    @property
    def end(self) -> int:
        return self.start + (self.hi - self.lo) * self.q_len

    def split(self, packed: torch.Tensor) -> torch.Tensor:
        """This part of packed `[1, heads, T, d]` as `[rows, heads, q_len, d]`."""
        heads, dim = packed.shape[1], packed.shape[3]
        return packed[0, :, self.start:self.end].view(heads, self.hi - self.lo, self.q_len, dim).transpose(0, 1)


def _packed(parts: list[torch.Tensor]) -> torch.Tensor:
    """Each part's `[rows, heads, q_len, d]` output, in order, back into one packed `[1, heads, T, d]`."""
    outs = [out.transpose(0, 1).reshape(out.shape[1], -1, out.shape[3]) for out in parts]
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1))[None]


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
        self._parts: list[_Part] = []

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

    def begin_step(self, q_lens: list[int]) -> torch.Tensor:
        """Start a step over every row, `q_lens[i]` new tokens for row i, packed (see the module's
        docstring). Returns the new tokens' positions `[1, T]`; `last_index` `[rows]` is each row's
        last new token's index in the packed step."""
        assert len(q_lens) == self.rows, "a step feeds every row"
        held = torch.tensor(self.lengths, device=self.device)
        counts = torch.tensor(q_lens, device=self.device)
        ends = counts.cumsum(0)
        # a token's position: its row's history plus its index among the row's new tokens
        row_of = torch.repeat_interleave(torch.arange(len(q_lens), device=self.device), counts)
        positions = held[row_of] + torch.arange(sum(q_lens), device=self.device) - (ends - counts)[row_of]
        self._parts = []
        lo, start = 0, 0
        for hi in range(1, len(q_lens) + 1):
            if hi < len(q_lens) and q_lens[hi] == q_lens[lo]:
                continue
            self._parts.append(self._part(lo, hi, q_lens[lo], start, positions))
            start += (hi - lo) * q_lens[lo]
            lo = hi
        self.ensure_positions(max(p.kv_len for p in self._parts))
        self.last_index = ends - 1
        self.step_positions = positions[None]
        return self.step_positions

    def _part(self, lo: int, hi: int, q_len: int, start: int, positions: torch.Tensor) -> _Part:
        """Rows lo..hi, `q_len` new tokens each from packed token `start`; `positions` `[T]` the step's."""
        rows = hi - lo
        part_positions = positions[start:start + rows * q_len].view(rows, q_len)
        kv_len = max(self.lengths[r] for r in range(lo, hi)) + q_len
        memory = self.memory_lengths[lo:hi]
        cross_mask = None
        if min(memory) != max(memory):
            lengths = torch.tensor(memory, device=self.device)
            cross_mask = (torch.arange(max(memory), device=self.device)[None, :] < lengths[:, None])[:, None, None, :]
        return _Part(lo=lo, hi=hi, q_len=q_len, start=start, kv_len=kv_len,
                     write_rows=torch.arange(rows, device=self.device).repeat_interleave(q_len),
                     write_cols=torch.arange(q_len, device=self.device).repeat(rows),
                     write_positions=part_positions.reshape(-1),
                     self_mask=(torch.arange(kv_len, device=self.device)[None, None, :]
                                <= part_positions[:, :, None])[:, None],
                     memory=max(memory), cross_mask=cross_mask)

    def attend_self(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    scale: float | None = None) -> torch.Tensor:
        """Causal self-attention of this step's packed queries over each row's history and its new
        tokens. q `[1, heads, T, d]`, k, v `[1, kv_heads, T, d]` -> `[1, heads, T, d]`; k, v are
        written to the cache."""
        return _packed([self._attend_part(layer, part, part.split(q), part.split(k), part.split(v), scale)
                        for part in self._parts])

    def _attend_part(self, layer: int, part: _Part, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     scale: float | None) -> torch.Tensor:
        keys, values = self.self_k[layer][part.lo:part.hi], self.self_v[layer][part.lo:part.hi]  # views: writes land
        keys[part.write_rows, :, part.write_positions] = k[part.write_rows, :, part.write_cols]
        values[part.write_rows, :, part.write_positions] = v[part.write_rows, :, part.write_cols]
        keys, values = keys[:, :, :part.kv_len], values[:, :, :part.kv_len]
        rows, heads, length, dim = q.shape
        kv_heads = keys.shape[1]
        if heads == kv_heads:
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=part.self_mask, scale=scale)
        # grouped-query attention: query head j reads key/value head j // group, so the group's queries
        # are stacked as one head's (`[rows, kv_heads, group * Q, d]`) over the cache as it is, instead
        # of repeating the keys and values per query head (a copy of the whole history per layer per
        # step: 3.8x the attention's time for 16 rows of 150 positions, 8 query heads over 4)
        group = heads // kv_heads
        mask = part.self_mask[:, :, None].expand(rows, 1, group, length, part.kv_len).reshape(
            rows, 1, group * length, part.kv_len)
        out = F.scaled_dot_product_attention(q.reshape(rows, kv_heads, group * length, dim), keys, values,
                                             attn_mask=mask, scale=scale)
        return out.reshape(rows, heads, length, dim)

    def attend_cross(self, layer: int, q: torch.Tensor, scale: float | None = None) -> torch.Tensor:
        """Attention of this step's packed queries `[1, heads, T, d]` over each row's encoder memory."""
        return _packed([F.scaled_dot_product_attention(
            part.split(q), self.cross_k[layer][part.lo:part.hi, :, :part.memory],
            self.cross_v[layer][part.lo:part.hi, :, :part.memory], attn_mask=part.cross_mask, scale=scale)
            for part in self._parts])

    def end_step(self) -> None:
        for part in self._parts:
            for row in range(part.lo, part.hi):
                self.lengths[row] += part.q_len
        self._parts = []

    def nbytes(self) -> int:
        """Bytes the cache's buffers hold now (the pool's charge for a model's decode state)."""
        return sum(t.numel() * t.element_size() for t in (*self.self_k, *self.self_v, *self.cross_k, *self.cross_v))
