"""Start `sie-server serve` as a subprocess on a free loopback port and wait
until it is ready: for tests, benchmarks and examples that need a real server.

    with start_server("--preload", "sentence-transformers/all-MiniLM-L6-v2") as server:
        httpx.post(server.url + "/v1/encode/...", json=...)

The server binds port 0 and prints its address; its output goes to a log file
(`server.log_text()`), so a busy server never blocks on a full pipe. `spawn` replaces how the
process is started (the test suite forks servers from an interpreter that has imported torch
and transformers already, tests/helpers/server_zygote.py).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

_LISTENING = re.compile(r"SIE listening on (http://\S+)")


class ServerProcess:
    def __init__(self, process: Any, log_path: Path, url: str):
        """`process`: a `subprocess.Popen`, or what a `spawn` returns with its pid, poll, wait,
        send_signal and kill."""
        self.process = process
        self.log_path = log_path
        self.url = url

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_containing(self, *needles: str, timeout: float = 10.0) -> str:
        """The log once every needle is in it (or after `timeout`): the access log line of a
        request is written after its answer is sent, so a client can see the answer first."""
        stop = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if all(n in text for n in needles) or time.monotonic() > stop:
                return text
            time.sleep(0.05)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, wait for the drain; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def server_command() -> list[str]:
    """The installed `sie-server` script next to this Python, else `python -m sie_server.cli`."""
    script = Path(sys.executable).with_name("sie-server")
    if script.exists():
        return [str(script)]
    found = shutil.which("sie-server")
    return [found] if found else [sys.executable, "-m", "sie_server.cli"]


def popen(command: list[str], env: dict[str, str], log_file: IO[bytes]) -> subprocess.Popen:
    """The default `spawn`: the command as a child process, its output into `log_file`."""
    return subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)


def start_server(*args: str, env: dict[str, str] | None = None, ready_timeout: float = 180.0,
                 wait_ready: bool = True, log_dir: str | Path | None = None,
                 spawn: Callable[[list[str], dict[str, str], IO[bytes]], Any] = popen) -> ServerProcess:
    """`sie-server serve --host 127.0.0.1 --port 0 *args`, waited on until /readyz answers 200
    (or only until it listens, with `wait_ready=False`). Raises RuntimeError with the log
    if it exits or is not ready within `ready_timeout` seconds. `spawn(command, env, log_file)`
    starts the process (default `popen`)."""
    log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="sie-server-"))
    log_path = log_dir / "server.log"
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    command = server_command() + ["serve", "--host", "127.0.0.1", "--port", "0", *args]
    with open(log_path, "wb") as log_file:
        process = spawn(command, full_env, log_file)
    deadline = time.monotonic() + ready_timeout
    url = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sie-server exited with {process.returncode}:\n{_read(log_path)}")
        if url is None:
            match = _LISTENING.search(_read(log_path))
            url = match.group(1) if match else None
        if url is not None and (not wait_ready or _ready(url)):
            return ServerProcess(process, log_path, url)
        time.sleep(0.1)
    process.kill()
    process.wait()
    raise RuntimeError(f"sie-server was not ready within {ready_timeout:.0f}s:\n{_read(log_path)}")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=2) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False
