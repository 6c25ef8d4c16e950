"""Host cost per request: sie-server against a minimal server, one nearly free model (issue 27).

    python bench/bench_host.py                  # 2 rounds x (1 text, 16 texts) x 10 s per system
    python bench/bench_host.py --seconds 5 --rounds 1 --clients 32
    python bench/bench_host.py --frontends 1,2   # also the split server (sie-split-N: N frontends + engine core)

The model is a 1-layer, 32-wide BERT with random weights and the real MiniLM tokenizer, so its
forward costs next to nothing and what is measured is the host work around it: HTTP, body
decoding, validation, tokenising, scheduling, answer encoding. The minimal server is the floor
for that work in Python: an aiohttp app that parses the JSON body, tokenises with the same
`tokenizers` tokenizer, takes the mean of the model's token-embedding rows per text on the event
loop and writes SIE's answer shape. Both serve `POST /v1/encode/free` with SIE's request body.

Both run as subprocesses on free loopback ports; one client process (this one) keeps `--clients`
requests in flight for `--seconds`, systems alternating within each round. Per system and request
size it prints the median round's requests/s, p50 and p99 latency and the server's CPU seconds per
request (user + system time of its process from /proc, all threads), then SIE's ratios to the
minimal server against issue 27's goals. The client shares the cores with the server, the same for
both systems; on a 2-core box the client's own cost caps the minimal server's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_server import free_port, pct  # noqa: E402
from common import MINILM_DIR, load_texts  # noqa: E402

MODEL = "free"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- the model

def make_free_model(dest: Path) -> Path:
    """A BERT whose forward is nearly free (1 layer, width 32) with MiniLM's tokenizer."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(dest, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (MINILM_DIR / name).exists():
            shutil.copy(MINILM_DIR / name, dest / name)
    return dest


# ----------------------------------------------------------------------------- the minimal server

def serve_minimal(model_dir: Path, port: int) -> None:
    """The floor: parse, tokenise, mean of embedding rows, answer; all on the event loop."""
    import numpy as np
    import orjson
    from aiohttp import web
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(512)
    table = next(v for k, v in load_file(str(model_dir / "model.safetensors")).items()
                 if k.endswith("word_embeddings.weight"))

    async def encode(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        items = body["items"]
        texts = [item if isinstance(item, str) else item["text"] for item in items]
        encodings = tokenizer.encode_batch(texts)
        answer = []
        for i, enc in enumerate(encodings):
            vector = table[enc.ids].mean(0)
            answer.append({"id": str(i), "dense": (vector / np.linalg.norm(vector)).tolist()})
        tokens = sum(len(enc.ids) for enc in encodings)
        return web.Response(body=orjson.dumps({"model": MODEL, "items": answer, "usage": {"tokens": tokens}}),
                            content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post(f"/v1/encode/{MODEL}", encode)
    app.router.add_get("/readyz", ready)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# ----------------------------------------------------------------------------- servers as processes

def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu_of(pid: int) -> float:
    try:
        fields = _stat(pid)
    except OSError:  # ended meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _tree(root: int) -> list[int]:
    """`root` and its descendants (from /proc's parent pids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat(int(entry.name))[1]), []).append(int(entry.name))
            except OSError:
                continue
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _role(pid: int) -> str:
    """A split server's process role, from its command line (supervisor.py starts each part
    as `python -m sie_server.split.core | .frontend`); "server" for anything else."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "server"
    for role in ("core", "frontend"):
        if f"sie_server.split.{role}".encode() in argv:
            return role
    return "server"


class Server:
    def __init__(self, name: str, argv: list[str], port: int):
        self.name, self.port = name, port
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
        self.process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> dict[str, float]:
        """User + system time so far of the server process and every process under it, every
        thread, by role: a split server's engine core, frontends and supervisor apart (one
        process: all of it under "server")."""
        by_role: dict[str, float] = {}
        for pid in _tree(self.process.pid):
            role = _role(pid)
            by_role[role] = by_role.get(role, 0.0) + _cpu_of(pid)
        return by_role

    async def wait_ready(self, session, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.process.stderr.read().decode()[-2000:]}")
            try:
                async with session.get(self.url + "/readyz") as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{self.name} was not ready within {timeout_s} s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def sie_from_tree(tree: Path) -> list[str]:
    """argv prefix running `sie-server` from another checkout (`git archive COMMIT | tar -x -C DIR`),
    not from this environment's editable install, whose finder would win over sys.path."""
    code = ("import sys; t = sys.argv.pop(1); sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
            "repr(f)]; sys.path.insert(0, t); sys.argv[0] = 'sie-server'; import sie_engine; "
            "assert sie_engine.__file__.startswith(t), sie_engine.__file__; import sie_server.cli as c; "
            "sys.exit(c.main())")
    if not (tree / "sie_server").exists():
        (tree / "sie_server").symlink_to("server")  # the package's import name (package-dir in pyproject)
    return [sys.executable, "-c", code, str(tree.resolve())]


def start_servers(model_dir: Path, also: Path | None = None, frontends: tuple[int, ...] = ()) -> list[Server]:
    minimal_port, sie_port = free_port(), free_port()
    sie = Path(sys.executable).with_name("sie-server")
    # no access log: the minimal server writes none either
    sie_args = ["serve", "--no-builtin", "--model", f"{MODEL}={model_dir}", "--device", "cpu", "--preload", MODEL,
                "--no-access-log"]
    extra: list[Server] = []
    if also is not None:  # an older checkout, side by side in the same run (before / after)
        port = free_port()
        extra = [Server("sie@" + also.name, [*sie_from_tree(also), *sie_args, "--port", str(port)], port)]
    for count in frontends:  # the split server (server/split/): N frontends and one engine core
        port = free_port()
        extra.append(Server(f"sie-split-{count}", [str(sie), *sie_args, "--frontends", str(count), "--port", str(port)],
                            port))
    return extra + [
        Server("minimal", [sys.executable, __file__, "--serve-minimal", str(model_dir), "--port", str(minimal_port)],
               minimal_port),
        Server("sie-server", [str(sie), *sie_args, "--port", str(sie_port)], sie_port),
    ]


# ----------------------------------------------------------------------------- load

@dataclass
class Pass:
    requests: int
    seconds: float
    cpu_by_role: dict[str, float]
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_by_role.values())


async def drive(session, server: Server, bodies: list[bytes], clients: int, seconds: float) -> Pass:
    """`clients` loops each sending its next request when answered, for `seconds`."""
    url = f"{server.url}/v1/encode/{MODEL}"
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def client(offset: int) -> None:
        i = offset
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            async with session.post(url, data=bodies[i % len(bodies)], headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{server.name} answered {response.status}: {await response.text()}")
            latencies.append(time.perf_counter() - started)
            i += clients

    cpu_before, started = server.cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed, cpu_after = time.perf_counter() - started, server.cpu_seconds()
    cpu = {role: seconds - cpu_before.get(role, 0.0) for role, seconds in cpu_after.items()}
    return Pass(len(latencies), elapsed, cpu, latencies)


def request_bodies(texts: list[str], per_request: int, count: int = 512) -> list[bytes]:
    return [json.dumps({"items": [{"text": texts[(i * per_request + j) % len(texts)]}
                                  for j in range(per_request)]}).encode() for i in range(count)]


async def run(args) -> int:
    import aiohttp

    # short texts: the dev corpus's first sentences, cut to a query's length
    texts = [" ".join(t.split()[:12]) for t in load_texts(2000)]
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[str, int], list[Pass]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        frontends = tuple(int(n) for n in args.frontends.split(",")) if args.frontends else ()
        servers = start_servers(make_free_model(Path(tmp)), args.also, frontends)
        connector = aiohttp.TCPConnector(limit=args.clients)
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                for server in servers:
                    await server.wait_ready(session)
                for size in sizes:  # warm both: first requests load, compile and fill caches
                    for server in servers:
                        await drive(session, server, request_bodies(texts, size), args.clients, 1.0)
                for round_ in range(args.rounds):
                    order = servers if round_ % 2 == 0 else servers[::-1]
                    for size in sizes:
                        bodies = request_bodies(texts, size)
                        for server in order:
                            measured = await drive(session, server, bodies, args.clients, args.seconds)
                            results.setdefault((server.name, size), []).append(measured)
                            print(f"round {round_ + 1} {server.name:12} {size:2} text(s): {measured.rate:8.0f} req/s",
                                  file=sys.stderr, flush=True)
        finally:
            for server in servers:
                server.stop()
    report(results, sizes, args)
    return 0


def report(results: dict[tuple[str, int], list[Pass]], sizes: list[int], args) -> None:
    print(f"\n{args.clients} clients, {args.seconds:g} s per pass, {args.rounds} round(s), median round\n")
    print("| request | system | req/s | p50 ms | p99 ms | server CPU ms/request |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    summary: dict[tuple[str, int], tuple[float, float, float]] = {}
    names = ["minimal", "sie-server"] + sorted({name for name, _ in results} - {"minimal", "sie-server"})
    for size in sizes:
        for name in names:
            passes = sorted(results[(name, size)], key=lambda p: p.rate)
            mid = passes[len(passes) // 2]
            rate = statistics.median(p.rate for p in passes)
            cpu_ms = 1000 * statistics.median(p.cpu_s / p.requests for p in passes)
            p99 = pct(mid.latencies, 99)  # pct gives milliseconds
            summary[(name, size)] = (rate, p99, cpu_ms)
            print(f"| {size} text{'s' if size > 1 else ''} | {name} | {rate:,.0f} | {pct(mid.latencies, 50):.1f} "
                  f"| {p99:.1f} | {cpu_ms:.2f} |")
    print("\nsie-server against the minimal server (issue 27's goals in brackets):")
    for size in sizes:
        (m_rate, m_p99, _), (s_rate, s_p99, s_cpu) = summary[("minimal", size)], summary[("sie-server", size)]
        goal = "1/3" if size == 1 else "0.8"
        print(f"  {size:2} text(s): rate {s_rate / m_rate:.2f}x [>= {goal}], p99 {s_p99 / m_p99:.1f}x [<= 3x], "
              f"CPU {s_cpu:.2f} ms/request{' [<= 0.3]' if size == 1 else ''}")
        for name in names[2:]:
            o_rate, o_p99, o_cpu = summary[(name, size)]
            print(f"  {size:2} text(s), {name}: rate {o_rate / m_rate:.2f}x, p99 {o_p99 / m_p99:.1f}x, "
                  f"CPU {o_cpu:.2f} ms/request{_by_role(results[(name, size)])}")


def _by_role(passes: list[Pass]) -> str:
    """A split server's CPU per request by process: the engine core's bounds its rate however
    many frontends there are (one core, one GIL), so it is the number a many-core host scales by."""
    roles = sorted({role for p in passes for role in p.cpu_by_role})
    if roles == ["server"]:  # one process
        return ""
    names = {"server": "supervisor"}  # the split server's root process
    parts = [f"{names.get(role, role)} "
             f"{1000 * statistics.median(p.cpu_by_role.get(role, 0.0) / p.requests for p in passes):.2f}"
             for role in roles]
    return f" (by process, ms/request: {', '.join(parts)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured pass")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; the systems' order alternates")
    parser.add_argument("--clients", type=int, default=32, help="requests in flight")
    parser.add_argument("--sizes", default="1,16", help="texts per request, comma-separated")
    parser.add_argument("--also", type=Path, help="another checkout's tree (e.g. `git archive COMMIT | tar -x -C DIR`) "
                        "whose sie-server runs side by side, as sie@DIR")
    parser.add_argument("--frontends", default="", help="also run the split server with each of these frontend "
                        "counts (comma-separated, e.g. 1,2), as sie-split-N")
    parser.add_argument("--serve-minimal", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_minimal:
        serve_minimal(args.serve_minimal, args.port)
        return 0
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
