"""First loads of several models, and of precision variants of one, started at the same
instant all succeed (issue #19: transformers' lazy imports raced across loader threads and
one load in most trials failed with "cannot import name 'AutoTokenizer'").

Each trial is a fresh Python process, so transformers is imported for the first time by
the loads themselves, as in a server that has just started."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tiny_models import make_tiny_bert

TRIALS = 3  # each failed before the fix (6 loads at once, every time on a 2-core box)

# Three models and two precisions: six first loads (tokenizer and weights) at once, on as
# many tokenizer threads, so every lazy import can be hit by two threads together.
TRIAL = textwrap.dedent("""
    import asyncio, sys
    from sie_engine import Catalog, Engine, ModelCard, WeightsSource

    roots = sys.argv[1:]
    cards = [ModelCard(id=f"tiny/{i}", weights=WeightsSource(path=root), max_seq_len=64)
             for i, root in enumerate(roots)]
    engine = Engine(Catalog(cards), device="cpu", tokenizer_threads=6, load_retry_cooldown_s=0.0)

    async def main():
        calls = [engine.encode(card.id, ["first load"], precision=precision)
                 for card in cards for precision in ("float32", "bfloat16")]
        results = await asyncio.gather(*calls, return_exceptions=True)
        failed = [repr(r) for r in results if isinstance(r, BaseException)]
        print("FAILED" if failed else "OK", len(results), failed[:2], flush=True)

    try:
        asyncio.run(main())
    finally:
        engine.close()
""")


def test_concurrent_first_loads_all_succeed(tmp_path: Path):
    roots = [str(make_tiny_bert(tmp_path / name, seed=seed)) for seed, name in enumerate("abc")]
    # the trials run side by side: each is mostly its own imports
    trials = [subprocess.Popen([sys.executable, "-c", TRIAL, *roots], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(TRIALS)]
    for trial, process in enumerate(trials):
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr[-3000:]
        assert stdout.startswith("OK 6"), f"trial {trial}: {stdout}\n{stderr[-3000:]}"
