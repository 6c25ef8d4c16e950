"""A real `sie-server router` subprocess and real workers, for the router tests."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import httpx

from server_fixtures import start_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    def __init__(self, process: subprocess.Popen, url: str, log: Path):
        self.process, self.url, self.log = process, url, log

    def workers(self) -> dict[str, dict]:
        answer = httpx.get(self.url + "/v1/router/workers", timeout=5).json()
        return {w["url"]: w for w in answer["workers"]}

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=5).text

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_router(args: list[str], log_dir: Path, ready_timeout: float = 60.0) -> Router:
    """`sie-server router --host 127.0.0.1 --port <free> *args`, waited on until /readyz is 200."""
    port = free_port()
    log = log_dir / "router.log"
    command = [sys.executable, "-m", "sie_server.cli", "router", "--host", "127.0.0.1", "--port", str(port), *args]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"router exited {process.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return Router(process, url, log)
        except OSError:
            pass
        time.sleep(0.1)
    process.kill()
    process.wait()
    raise RuntimeError(f"router not ready within {ready_timeout:.0f}s:\n{log.read_text()}")


def start_workers(arg_lists: list[list[str]], tmp_path_factory) -> list:
    """Start several `sie-server serve` side by side (each start is mostly torch import)."""
    workers: list = [None] * len(arg_lists)
    errors: list = []

    def start(i):
        try:
            workers[i] = start_server(*arg_lists[i], log_dir=tmp_path_factory.mktemp(f"worker{i}"))
        except Exception as exc:  # re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(len(arg_lists))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for w in workers:
            if w is not None:
                w.stop()
        raise errors[0]
    return workers
