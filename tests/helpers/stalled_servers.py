"""Servers on loopback that misbehave at the socket level, for the client's timeout tests:
one that accepts connections and never answers (a hung server), one that answers its
headers and then trickles the body a byte at a time, and one whose listen queue is full,
so that a connect hangs (a black-holed host)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Stalled:
    url: str
    requests: list[float] = field(default_factory=list)  # monotonic time each request arrived


def _read_request(connection: socket.socket) -> bool:
    """Read one request's head and body (Content-Length); False when the peer closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return False
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            return False
        body += chunk
    return True


@contextlib.contextmanager
def _serving(handle) -> Iterator[Stalled]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    server = Stalled(f"http://127.0.0.1:{listener.getsockname()[1]}")
    stop = threading.Event()
    open_connections: list[socket.socket] = []

    def serve_one(connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set() and _read_request(connection):
                server.requests.append(time.monotonic())
                handle(connection, stop)

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            open_connections.append(connection)
            threading.Thread(target=serve_one, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(5)
        for connection in open_connections:
            connection.close()
        listener.close()


@contextlib.contextmanager
def hung_server() -> Iterator[Stalled]:
    """Reads each request whole, then never answers (the connection stays open)."""

    def never(connection: socket.socket, stop: threading.Event) -> None:
        stop.wait()

    with _serving(never) as server:
        yield server


@contextlib.contextmanager
def trickling_server(interval_s: float = 0.1) -> Iterator[Stalled]:
    """Answers 200 with a 10,000-byte JSON body announced, sent one byte per `interval_s`:
    no read ever waits long, the answer never ends in time."""

    def trickle(connection: socket.socket, stop: threading.Event) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n")
        while not stop.wait(interval_s):
            connection.sendall(b" ")

    with _serving(trickle) as server:
        yield server


@contextlib.contextmanager
def unaccepting_server() -> Iterator[str]:
    """A port whose listen queue is full and never accepted: a new connect gets no SYN-ACK and
    hangs until the client's connect timeout (as a black-holed host does); yields its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue (its length is backlog + 1 on Linux)
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
