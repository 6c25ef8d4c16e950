"""GPU check of the attention backends: the CUDA varlen backend SIE selects (flash-attn or
PyTorch's varlen kernel) against the grouped SDPA backend on the same GPU, in float16 and
bfloat16, for plain, causal, windowed, grouped-query and key-limited (ColBERT query
expansion) attention over sequences of different lengths.

    python bench/gpu_check_attention.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from sie_engine.attention import GroupedSDPAAttention, default_scale, select_backend  # noqa: E402

LENS = [1, 7, 32, 64, 129, 300]
CASES = {  # name: (kv heads, causal, window, key-limited)
    "plain": (8, False, None, False),
    "causal": (8, True, None, False),
    "window": (8, False, (16, 16), False),
    "gqa": (2, True, None, False),
    "key-limited": (8, False, None, True),
}


def main() -> int:
    device = torch.device("cuda")
    failures = 0
    print("| dtype | case | backend | max abs diff vs grouped SDPA | result |")
    print("| --- | --- | --- | --- | --- |")
    for dtype in (torch.float16, torch.bfloat16):
        backend = select_backend(device, dtype)
        grouped = GroupedSDPAAttention()
        for name, (kv, causal, window, limited) in CASES.items():
            torch.manual_seed(0)
            total, heads, dim = sum(LENS), 8, 64
            q = torch.randn(total, heads, dim, device=device, dtype=dtype)
            k = torch.randn(total, kv, dim, device=device, dtype=dtype)
            v = torch.randn(total, kv, dim, device=device, dtype=dtype)
            key_lens = [max(1, n // 2) for n in LENS] if limited else None
            try:
                got = backend(q, k, v, backend.prepare(LENS, device, key_lens), scale=default_scale(dim),
                              causal=causal, window=window)
                want = grouped(q, k, v, grouped.prepare(LENS, device, key_lens), scale=default_scale(dim),
                               causal=causal, window=window)
                diff = (got.float() - want.float()).abs().max().item()
                ok = diff < (2e-2 if dtype == torch.bfloat16 else 5e-3)
                result = "pass" if ok else "FAIL"
            except Exception as exc:  # report and go on with the other cases
                diff, ok, result = float("nan"), False, f"FAIL {type(exc).__name__}: {exc}"
            failures += not ok
            print(f"| {str(dtype).removeprefix('torch.')} | {name} | {backend.name} | {diff:.2e} | {result} |")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
