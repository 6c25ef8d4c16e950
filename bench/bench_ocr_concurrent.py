"""OCR pages under concurrent requests: SIE's engine (continuous batching: a page joins the running
decode batch at the next step and leaves it the step it ends, pages packed) against transformers'
batched `generate` behind a dynamic batcher, on the same random LightOnOCR weights (issue 28).

The model: a LightOnOCR whose Qwen3 decoder has 4 layers, 512 wide (8 query heads, 4 key/value
heads) over the 64-word vocabulary of the tests' tokenizer, and a 2-layer, 128-wide Pixtral tower
(patch 8, merge 2); pages of six sizes, 16 to 64 image tokens after the processor's resize. No real
weights install offline, so the words mean nothing, but both sides must read every page alike
(checked, page by page). A real page's text has its own length; to give the random decoder that,
the stop token is picked from its own output: the word whose first appearance varies most across
the pages (beside `<|im_end|>`), so pages end anywhere from a few tokens to `--max-new-tokens`.

`--clients` clients each send one page per request and the next when answered (a closed loop),
`--requests` requests in all:
- transformers: the way one serves it without an engine: a batcher takes every request waiting
  (at most `--batch`) into one `processor(...)` + `generate(...)` call, left-padded, and answers
  them all when its longest page ends; clients answered together send their next pages together,
  so with `--batch` >= `--clients` each batch is the clients' next pages;
- SIE: an in-process `Engine` serving the built-in `lightonai/LightOnOCR-2-1B` card on these weights,
  the clients awaiting `AsyncSIEClient(engine=...).extract(card, [png])` (PNG bytes: SIE also
  decodes and resizes each page; transformers is handed the decoded images).

transformers runs in a process of its own (system_process.py), as one process per model would,
and SIE in this one, which runs no torch operator on several threads itself: two OpenMP teams in
one process slow each other's every barrier (sie_engine/inference_threads.py), whichever side is
running.

Per side and round: generated tokens per second over the run, and the latency of each request from
its sending to its answer (p50, p99). Rounds alternate which side runs first; both sides are warmed
up first. Prints the ratios against issue 28's goal (>= 2x), and the workload's own bound on what
continuous batching gains: transformers' row-steps (every row of a batch decoded until its longest
page ends) over the tokens the pages need.

    python bench/bench_ocr_concurrent.py [--requests 64] [--clients 16] [--batch 16] [--max-new-tokens 48] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))
from common import until_stop  # noqa: E402
from system_process import SystemProcess  # noqa: E402

from lighton_ocr_fixtures import SPECIALS, tiny_lighton_ocr, tiny_lighton_ocr_processor  # noqa: E402

CARD = "lightonai/LightOnOCR-2-1B"
VISION = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, head_dim=32,
              patch_size=8, image_size=256)
TEXT = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
            num_key_value_heads=4, head_dim=64, max_position_embeddings=512)
LONGEST_EDGE = 128
SIZES = [(128, 128), (128, 64), (64, 128), (96, 96), (128, 96), (64, 64)]  # (width, height) after the resize
IM_END = 3  # <|im_end|>: the chat's own end of a turn


@dataclasses.dataclass
class Run:
    seconds: float
    latencies: list[float]
    texts: list[str]

    def rate(self, tokens: int) -> float:
        return tokens / self.seconds


def pct(latencies: list[float], q: float) -> float:
    return float(np.percentile(latencies, q))


def pages(count: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            for w, h in (SIZES[i % len(SIZES)] for i in range(count))]


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


class Transformers:
    def __init__(self, model, processor, max_new_tokens: int):
        self.model, self.processor, self.new = model, processor, max_new_tokens
        processor.tokenizer.padding_side = "left"  # generation continues each row at its end
        self.prompt = processor.apply_chat_template([{"role": "user", "content": [{"type": "image"}]}],
                                                    add_generation_prompt=True, tokenize=False)

    def generate(self, images: list[Image.Image], stops: list[int] | None) -> list[list[int]]:
        inputs = self.processor(images=images, text=[self.prompt] * len(images), return_tensors="pt", padding=True)
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=self.new, do_sample=False, num_beams=1,
                                      eos_token_id=stops, pad_token_id=0)
        return out[:, inputs["input_ids"].shape[1]:].tolist()

    def serve(self, images: list[Image.Image], clients: int, batch: int, stops: list[int]) -> Run:
        """The closed loop: each batch is the pages of the clients its predecessor answered."""
        latencies, texts = [], []
        started = time.perf_counter()
        for first in range(0, len(images), min(clients, batch)):
            group = images[first:first + min(clients, batch)]
            sent = time.perf_counter()
            rows = self.generate(group, stops)
            done = time.perf_counter()
            latencies += [done - sent] * len(group)
            texts += [self.processor.decode(row, skip_special_tokens=True) for row in rows]
        return Run(time.perf_counter() - started, latencies, texts)


def pick_stop(rows: list[list[int]], new: int) -> int:
    """The word whose first appearance is spread most across the pages, among those that end most
    pages early and half of them in the middle half of the budget (as pages of text end)."""
    def ends(token: int) -> list[int]:
        return [len(until_stop(row, [token, IM_END])) for row in rows]  # rows of `new` tokens, none stopped

    def fits(token: int) -> bool:
        lengths = ends(token)
        return sum(e < new for e in lengths) >= 0.6 * len(rows) and new / 4 <= statistics.median(lengths) <= 3 * new / 4

    spread = {t: statistics.pstdev(ends(t)) for t in {t for row in rows for t in row if t >= len(SPECIALS)} if fits(t)}
    if not spread:
        raise SystemExit("no word of the decoder's output ends most pages early; try another --max-new-tokens")
    return max(spread, key=lambda t: (spread[t], -t))


async def sie_serve(client, blobs: list[bytes], clients: int) -> Run:
    latencies: list[float] = [0.0] * len(blobs)
    texts: list[str] = [""] * len(blobs)
    queue = iter(range(len(blobs)))

    async def one_client() -> None:
        for i in queue:
            sent = time.perf_counter()
            result = await client.extract(CARD, [blobs[i]])
            latencies[i] = time.perf_counter() - sent
            texts[i] = result.items[0].text

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return Run(time.perf_counter() - started, latencies, texts)


def sie_engine(root: Path, new: int, stops: list[int]):
    from sie_engine import Catalog, Engine, ModelCard, WeightsSource

    base = Catalog.builtin().get(CARD)
    generate = {"task_prompt": "{image}", "max_new_tokens": new, "generation": {"eos_token_id": stops}}
    card = dataclasses.replace(base, weights=WeightsSource(path=str(root)), max_seq_len=TEXT["max_position_embeddings"],
                               options={**base.options, "generate": generate})
    ModelCard.from_dict(yaml.safe_load(yaml.safe_dump(card.to_dict())))  # the card as a file would give it
    return Engine(Catalog([card]), device="cpu")


def summary(name: str, run: Run, tokens: int) -> str:
    return (f"{name:12} {run.rate(tokens):7.1f} tokens/s  {run.seconds:6.2f} s  p50 {pct(run.latencies, 50):6.2f} s  "
            f"p99 {pct(run.latencies, 99):6.2f} s")


class TransformersSide:
    """The transformers side, built in a process of its own (system_process.py): makes the weights
    (SIE loads them from the folder `root` names) and the pages."""

    def __init__(self, requests: int, max_new_tokens: int):
        self.root = tempfile.mkdtemp()
        reference = tiny_lighton_ocr(Path(self.root), vision=VISION, text=TEXT)
        processor = tiny_lighton_ocr_processor(Path(self.root), longest_edge=LONGEST_EDGE,
                                               patch_size=VISION["patch_size"])
        self.hf = Transformers(reference, processor, max_new_tokens)
        self.images = pages(requests)
        self.threads = torch.get_num_threads()

    def rows(self, batch: int) -> list[list[int]]:
        """The pages' rows, unstopped, in generate calls of `batch` pages."""
        groups = (self.images[first:first + batch] for first in range(0, len(self.images), batch))
        return [row for group in groups for row in self.hf.generate(group, None)]

    def serve(self, count: int, clients: int, batch: int, stops: list[int]) -> tuple:
        """A run over the first `count` pages, as Run's fields."""
        return dataclasses.astuple(self.hf.serve(self.images[:count], clients, batch, stops))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16, help="transformers: the most pages in one generate call")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from sie_client import AsyncSIEClient

    hf = SystemProcess(TransformersSide, args.requests, args.max_new_tokens, attributes=("root", "threads"))
    blobs = [png(image) for image in pages(args.requests)]
    unstopped = hf.call("rows", args.batch)
    stops = [IM_END, pick_stop(unstopped, args.max_new_tokens)]
    ends = [len(until_stop(row, stops)) for row in unstopped]
    tokens = sum(ends)
    print(f"stop tokens {stops}: pages end after {min(ends)}-{max(ends)} tokens (median {statistics.median(ends)}), "
          f"{tokens} generated in all; {args.requests} requests of one page, {args.clients} clients, "
          f"transformers batches of at most {args.batch}; torch threads {hf.threads}", flush=True)
    # each transformers batch decodes all its rows until its longest page ends; continuous batching
    # decodes each page's own tokens only: the most it can gain where a row's step costs the same
    group = min(args.clients, args.batch)
    padded = sum(len(part) * max(part) for part in (ends[i:i + group] for i in range(0, len(ends), group)))
    print(f"transformers decodes {padded} row-steps for them: {padded / tokens:.2f}x the tokens, the gain "
          "continuous batching can give at an equal cost per row and step", flush=True)

    with sie_engine(Path(hf.root), args.max_new_tokens, stops) as engine:
        async with AsyncSIEClient(engine=engine) as client:
            await sie_serve(client, blobs[:4], 2)  # warm-up: the load, the first steps' one-time costs
            hf.call("serve", 4, 2, args.batch, stops)
            runs: dict[str, list[Run]] = {"transformers": [], "sie": []}
            for round_ in range(args.rounds):
                for side in (("transformers", "sie") if round_ % 2 == 0 else ("sie", "transformers")):
                    if side == "sie":
                        run = await sie_serve(client, blobs, args.clients)
                    else:
                        run = Run(*hf.call("serve", args.requests, args.clients, args.batch, stops))
                    runs[side].append(run)
                    print(f"round {round_ + 1} {summary(side, run, tokens)}", flush=True)

    hf.close()
    alike = sum(a == b for a, b in zip(runs["sie"][-1].texts, runs["transformers"][-1].texts, strict=True))
    print(f"pages read alike by both sides: {alike} of {args.requests}")
    for round_ in range(args.rounds):
        ours, theirs = runs["sie"][round_], runs["transformers"][round_]
        print(f"round {round_ + 1}: SIE / transformers tokens/s {ours.rate(tokens) / theirs.rate(tokens):.2f}x "
              f"(goal >= 2x); p50 {pct(ours.latencies, 50) / pct(theirs.latencies, 50):.2f}x, "
              f"p99 {pct(ours.latencies, 99) / pct(theirs.latencies, 99):.2f}x of transformers'")
    if alike != args.requests:
        raise SystemExit("the two sides read some pages differently: the comparison does not hold")


if __name__ == "__main__":
    asyncio.run(main())
