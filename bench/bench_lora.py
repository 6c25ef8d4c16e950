"""What LoRA adapters cost a batch: a MiniLM-sized BERT (6 layers, hidden 384, random weights) on
one packed batch of 32 texts of 80 tokens, run by SIE's runner with no adapter, every sequence on
one adapter, and the sequences spread over 4 and over 32 adapters (rank 8 on query, key, value and
every dense layer, as peft's `target_modules=["query", "key", "value", "dense"]` saves them).

    python bench/bench_lora.py [--repeat 20] [--device cpu]

Prints milliseconds per batch (best of --repeat) and the cost over the base model. The segmented
matmul loops over the batch's adapters (layers/lora.py): its cost is the deltas' FLOPs plus a few
small matmuls per adapter and layer.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def build(root: Path, adapters: int, rank: int):
    from peft import LoraConfig, get_peft_model
    from transformers import BertConfig, BertModel

    from sie_engine import ModelCard, WeightsSource
    from sie_engine.lora import load_adapter
    from sie_engine.runner import build_runner

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                        intermediate_size=1536)
    BertModel(config).eval().save_pretrained(root / "base")
    from tiny_models import copy_tokenizer  # the MiniLM tokenizer files
    copy_tokenizer(root / "base")
    card = ModelCard(id="bench/lora", weights=WeightsSource(path=str(root / "base")), max_seq_len=128,
                     max_batch_tokens=4096)
    runner = build_runner(card, root / "base", torch.device(args.device))
    loaded = []
    for i in range(adapters):
        peft_model = get_peft_model(BertModel.from_pretrained(str(root / "base")),
                                    LoraConfig(r=rank, lora_alpha=2 * rank, init_lora_weights=False,
                                               target_modules=["query", "key", "value", "dense"]))
        peft_model.save_pretrained(str(root / f"a{i}"))
        loaded.append(load_adapter(f"a{i}", root / f"a{i}", runner.backbone, runner.device, runner.dtype))
    return runner, loaded


def timed(runner, batches: dict[str, list], repeat: int) -> dict[str, float]:
    """Best milliseconds per batch of each kind; the kinds take turns, so a busy machine's noise
    falls on all of them alike."""
    best = dict.fromkeys(batches, float("inf"))
    for _ in range(repeat):
        for name, items in batches.items():
            started = time.perf_counter()
            runner.run(items)
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: seconds * 1e3 for name, seconds in best.items()}


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from sie_engine.work import WorkItem

    with tempfile.TemporaryDirectory() as tmp:
        runner, adapters = build(Path(tmp), 32, args.rank)
        rng = np.random.default_rng(0)
        ids = [np.concatenate([[101], rng.integers(1000, 30000, 78), [102]]).astype(np.int32) for _ in range(32)]

        def items(spread: int | None):
            return [WorkItem(None, i, x, outputs=frozenset({"dense"}), extra=False,
                             adapter=None if spread is None else adapters[i % spread]) for i, x in enumerate(ids)]

        batches = {"no adapter": items(None), **{f"{n} adapter(s)": items(n) for n in (1, 4, 32)}}
        times = timed(runner, batches, args.repeat)
        base = times["no adapter"]
        for name, ms in times.items():
            print(f"{name:>14}: {ms:8.2f} ms per batch of 32 x 80 tokens (+{100 * (ms / base - 1):.0f}%)",
                  flush=True)
