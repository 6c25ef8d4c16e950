"""The grouped SDPA backend equals plain per-sequence attention (causal, windows, GQA)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sie_engine.attention import GroupedSDPAAttention, default_scale


def _reference(q, k, v, lens, scale, causal, window):
    outs, start = [], 0
    for n in lens:
        qs, ks, vs = (t[start:start + n].transpose(0, 1) for t in (q, k, v))  # [H, n, D]
        if ks.shape[0] != qs.shape[0]:
            rep = qs.shape[0] // ks.shape[0]
            ks, vs = ks.repeat_interleave(rep, 0), vs.repeat_interleave(rep, 0)
        scores = qs @ ks.transpose(1, 2) * scale
        i = torch.arange(n)
        rel = i[None, :] - i[:, None]
        allowed = torch.ones(n, n, dtype=torch.bool)
        if causal:
            allowed &= rel <= 0
        if window:
            allowed &= (rel >= -window[0]) & (rel <= window[1])
        scores = scores.masked_fill(~allowed, float("-inf"))
        outs.append((F.softmax(scores, -1) @ vs).transpose(0, 1))
        start += n
    return torch.cat(outs)


@pytest.mark.parametrize("lens", [[5], [7, 7, 7], [3, 17, 9, 16, 1, 30, 29], [64, 2]])
@pytest.mark.parametrize("causal,window", [(False, None), (True, None), (False, (4, 4)), (True, (6, 0))])
@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("solo_min_len", [None, 16, 1])
def test_grouped_sdpa_matches_reference(lens, causal, window, kv_heads, solo_min_len):
    torch.manual_seed(0)
    total, heads, dim = sum(lens), 4, 8
    q = torch.randn(total, heads, dim)
    k = torch.randn(total, kv_heads, dim)
    v = torch.randn(total, kv_heads, dim)
    backend = GroupedSDPAAttention(solo_min_len=solo_min_len)
    meta = backend.prepare(lens, torch.device("cpu"))
    out = backend(q, k, v, meta, scale=default_scale(dim), causal=causal, window=window)
    expected = _reference(q, k, v, lens, default_scale(dim), causal, window)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_padding_is_bounded_and_counted():
    lens = [100, 95, 90, 50, 48, 10]
    meta = GroupedSDPAAttention(max_pad_fraction=0.125).prepare(lens, torch.device("cpu"))
    assert meta.padded_tokens == (100 - 95) + (100 - 90) + (50 - 48)
    assert meta.padded_tokens <= 0.125 * sum(lens)
    assert int(meta.cu_seqlens[-1]) == sum(lens) and meta.max_seqlen == 100


def test_equal_adjacent_lengths_need_no_copy():
    meta = GroupedSDPAAttention().prepare([8, 8, 8], torch.device("cpu"))
    assert len(meta.groups) == 1 and meta.groups[0].contiguous == (0, 24) and meta.padded_tokens == 0


def test_long_sequences_run_alone_on_views():
    """Sequences of solo_min_len tokens or more get a call of their own on a slice of the
    packed tensor; shorter ones still share padded calls."""
    lens = [40, 8, 33, 7, 32, 31]
    meta = GroupedSDPAAttention(solo_min_len=32).prepare(lens, torch.device("cpu"))
    solo = {(g.contiguous, g.n) for g in meta.groups if g.length >= 32}
    assert solo == {((0, 40), 1), ((48, 81), 1), ((88, 120), 1)}
    short = sorted(g.n for g in meta.groups if g.length < 32)
    assert short == [1, 2]  # 31 alone (8 and 7 are too short to join it), then 8 with 7
    assert meta.padded_tokens == 1


@pytest.mark.parametrize("lens,key_lens", [([9, 9, 9], [4, 9, 6]), ([12, 5, 30], [3, 5, 17])])
@pytest.mark.parametrize("solo_min_len", [None, 1])
def test_keys_limited_to_a_prefix(lens, key_lens, solo_min_len):
    """Every token is a query, only the first key_lens[i] tokens of sequence i are keys."""
    torch.manual_seed(1)
    total, heads, dim = sum(lens), 2, 8
    q, k, v = (torch.randn(total, heads, dim) for _ in range(3))
    backend = GroupedSDPAAttention(solo_min_len=solo_min_len)
    out = backend(q, k, v, backend.prepare(lens, torch.device("cpu"), key_lens), scale=default_scale(dim))
    start, expected = 0, []
    for n, keys in zip(lens, key_lens):
        qs = q[start:start + n].transpose(0, 1)
        ks, vs = k[start:start + keys].transpose(0, 1), v[start:start + keys].transpose(0, 1)
        expected.append((F.softmax(qs @ ks.transpose(1, 2) * default_scale(dim), -1) @ vs).transpose(0, 1))
        start += n
    torch.testing.assert_close(out, torch.cat(expected), atol=1e-5, rtol=1e-5)
