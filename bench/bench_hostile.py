"""The connection and router attacks of issue #30 (points 5, 6), measured against one checkout.

Starts a real `sie-server serve` (all-MiniLM-L6-v2, preloaded) and a `sie-server router` in front of
it, both from this environment or, with `--tree DIR`, from another checkout (`git archive COMMIT |
tar -x -C DIR`: the before side), runs each attack on loopback and prints one Markdown row per
attack. Only options both sides know are passed: each side runs its own defaults.

    python bench/bench_hostile.py                       # after
    python bench/bench_hostile.py --tree /tmp/before    # before
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_host import sie_from_tree  # noqa: E402
from common import MINILM_DIR, MINILM_ID  # noqa: E402

MODEL = "enc"
# junk model ids sent one request each (the 5,000 took ~12 min on a loaded 2-core box)
JUNK_IDS = 1000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(prefix: list[str], args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    out = open(log, "wb")  # noqa: SIM115 (kept open for the process's life)
    process = subprocess.Popen([*prefix, *args, "--host", "127.0.0.1", "--port", str(port)], stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{args[0]} exited {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{args[0]} never turned ready:\n{log.read_text()}")


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def rss_mib(process: subprocess.Popen) -> float:
    return psutil.Process(process.pid).memory_info().rss / 2**20


def slowest_healthz(url: str, busy: threading.Thread) -> float:
    slowest = 0.0
    while busy.is_alive():
        started = time.monotonic()
        httpx.get(url + "/healthz", timeout=60)
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.05)
    return slowest


def idle_sockets(url: str, cap: int) -> str:
    """cap + 40 idle sockets re-opened as fast as they are closed; 40 requests on new connections."""
    stop, sockets = threading.Event(), []

    def flood():
        while not stop.is_set():
            for sock in list(sockets):
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        sockets.remove(sock)
                        sock.close()
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    sockets.remove(sock)
                    sock.close()
            while len(sockets) < cap + 40:
                try:
                    sockets.append(socket.create_connection(address(url), timeout=2))
                except OSError:
                    break
            time.sleep(0.01)

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    time.sleep(1.0)
    ok = 0
    for _ in range(40):
        try:
            ok += httpx.post(url + f"/v1/encode/{MODEL}", json={"items": ["hello"]}, timeout=10).status_code == 200
        except httpx.HTTPError:
            pass
    stop.set()
    flooder.join(5)
    for sock in sockets:
        sock.close()
    return f"{ok} of 40 requests answered 200"


def unread_answers(url: str, server: subprocess.Popen, clients: int = 8, texts: int = 2000) -> str:
    """Clients that ask for large answers and never read: the server's RSS while they wait, and
    40 s later (past a 30 s send timeout), and how many of their connections it still holds."""
    body = json.dumps({"items": [f"text {i}" for i in range(texts)]}).encode()
    request = (f"POST /v1/encode/{MODEL} HTTP/1.1\r\nHost: sie\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    size = len(httpx.post(url + f"/v1/encode/{MODEL}", content=body, timeout=120,
                          headers={"Content-Type": "application/json"}).content)
    baseline = rss_mib(server)
    sockets = []
    for _ in range(clients):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(address(url))
        sock.sendall(request)
        sockets.append(sock)
    peak, started = baseline, time.monotonic()
    while time.monotonic() - started < 40:
        peak = max(peak, rss_mib(server))
        time.sleep(0.2)
    held = rss_mib(server) - baseline
    port = address(url)[1]
    still = sum(1 for c in psutil.Process(server.pid).net_connections() if c.laddr and c.laddr.port == port
                and c.status == psutil.CONN_ESTABLISHED)
    for sock in sockets:
        sock.close()
    return (f"{clients} x {size / 2**20:.1f} MB answers: peak +{peak - baseline:.0f} MiB; after 40 s "
            f"+{held:.0f} MiB, {still} connections held")


def held_uploads(url: str, server: subprocess.Popen, uploads: int = 40, declared: int = 8 * 2**20) -> str:
    """Uploads that declare `declared` bytes and stop 1,000 bytes short."""
    baseline = rss_mib(server)
    sockets = []
    for _ in range(uploads):
        sock = socket.create_connection(address(url))
        sock.sendall((f"POST /v1/encode/{MODEL} HTTP/1.1\r\nHost: sie\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {declared}\r\n\r\n").encode())
        try:
            sock.sendall(b" " * (declared - 1000))
        except OSError:
            pass  # refused early: the server closed it
        sockets.append(sock)
    time.sleep(1.0)
    grown = rss_mib(server) - baseline
    status = httpx.post(url + f"/v1/encode/{MODEL}", json={"items": ["x"]}, timeout=10).status_code
    for sock in sockets:
        sock.close()
    return f"+{grown:.0f} MiB held; a small request meanwhile: {status}"


def gzip_bomb(mib: int) -> bytes:
    zeros = bytes(2**20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()[:-8]
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    return first + block * (mib - 1) + end + struct.pack("<II", crc, (mib * 2**20) & 0xFFFFFFFF)


class Rows(list):
    """Rows printed as they are measured (a long run keeps what it measured)."""

    def append(self, row) -> None:
        super().append(row)
        print(f"| {row[0]} | {row[1]} |", flush=True)


def router_rows(router: str, rows: list) -> None:
    json_headers = {"Content-Type": "application/json"}
    nested = b'{"model": "' + MODEL.encode() + b'", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = httpx.post(router + "/v1/embeddings", content=nested, headers=json_headers, timeout=30)
    rows.append(("deeply nested JSON on a body-routed path (6)", f"{answer.status_code}"))
    answer = httpx.post(router + "/v1/embeddings", content=b"not gzip", timeout=30,
                        headers={**json_headers, "Content-Encoding": "gzip"})
    rows.append(("a gzip body that is not gzip (6)", f"{answer.status_code}"))
    answer = httpx.post(router + "/v1/embeddings", content=b"x", timeout=30,
                        headers={**json_headers, "Content-Encoding": "br"})
    rows.append(("`Content-Encoding: br` (6)", f"{answer.status_code} {answer.headers.get('Content-Type', '')}"))
    bomb = gzip_bomb(1024)
    outcome: list[int] = []
    sender = threading.Thread(target=lambda: outcome.append(httpx.post(
        router + "/v1/embeddings", content=bomb, timeout=120,
        headers={**json_headers, "Content-Encoding": "gzip"}).status_code))
    sender.start()
    slowest = slowest_healthz(router, sender)
    rows.append(("a 1 GiB gzip bomb: status, slowest `/healthz` (6)", f"{outcome[0]}, {slowest:.2f} s"))
    sockets = []
    for _ in range(300):
        sock = socket.create_connection(address(router))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        sockets.append(sock)
    time.sleep(15)
    still = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            still += sock.recv(1) != b""
        except BlockingIOError:
            still += 1
        except OSError:
            pass
        sock.close()
    rows.append(("300 slowloris sockets: still open after 15 s (6)", f"{still}"))
    before = len(httpx.get(router + "/metrics", timeout=30).content)
    for i in range(JUNK_IDS):
        httpx.post(router + f"/v1/encode/junk-{i}", content=b'{"items": ["x"]}', headers=json_headers, timeout=30)
    after = len(httpx.get(router + "/metrics", timeout=30).content)
    rows.append((f"{JUNK_IDS:,} junk model ids: `/metrics` size (6)",
                 f"{before / 1024:.0f} KB -> {after / 1024:.0f} KB"))
    statuses = [httpx.post(router + f"/v1/encode/{MODEL}", json={"items": ["x"]}, timeout=30,
                           headers={"X-SIE-Timeout-Ms": value}).status_code for value in ("NaN", "0", "-5")]
    rows.append(("`X-SIE-Timeout-Ms` NaN, 0, -5 (6)", ", ".join(map(str, statuses))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="another checkout's tree to run (default: this environment)")
    args = parser.parse_args()
    prefix = sie_from_tree(args.tree) if args.tree else [str(Path(sys.executable).with_name("sie-server"))]
    cap = 256
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        server, url = launch(prefix, ["serve", "--no-builtin", "--model", f"{MODEL}={MINILM_DIR}", "--device", "cpu",
                                      "--preload", MODEL, "--max-connections", str(cap), "--no-access-log"],
                             logs / "server.log")
        router_process = None
        side = f"tree {args.tree}" if args.tree else "this checkout"
        print(f"| attack ({side}, {MINILM_ID} as {MODEL!r}) | result |\n| --- | --- |", flush=True)
        rows = Rows()
        try:
            rows.append(("idle sockets re-opened in a loop at the connection cap (5)", idle_sockets(url, cap)))
            rows.append(("clients that never read large answers (5)", unread_answers(url, server)))
            rows.append(("40 uploads of 8 MiB held 1,000 bytes short (5)", held_uploads(url, server)))
            router_process, router = launch(prefix, ["router", f"--worker={url}", "--poll-interval=0.2"],
                                            logs / "router.log")
            router_rows(router, rows)
        finally:
            for process in (router_process, server):
                if process is not None:
                    process.terminate()
                    process.wait(30)


if __name__ == "__main__":
    main()
