"""The per-connection write-buffer bound and the send timeout (issue #30.5), on real sockets.

A server process serves one large answer (the same 24 MB bytes object for every request, so
the answers themselves cost nothing per connection and what is measured is what each
connection buffers) through `ConnectionLimitedRunner`, the runner sie-server and the router
serve with. Clients that ask for it and never read must cost the server at most
`WRITE_BUFFER_BYTES` each, and be closed after the send timeout; a client that reads gets every
byte, twice over one keep-alive connection."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import httpx
import psutil
import pytest

from sie_server.slow_clients import WRITE_BUFFER_BYTES

MiB = 2**20
ANSWER = 24 * MiB
SEND_TIMEOUT_S = 1.0
CLIENTS = 8

SERVER = textwrap.dedent(f"""
    import asyncio, logging
    from aiohttp import web
    from sie_server.connections import ConnectionLimitedRunner
    from sie_server.settings import ServerSettings

    ANSWER = bytes(range(256)) * ({ANSWER} // 256)  # one object, shared by every answer

    async def big(request):
        return web.Response(body=ANSWER, content_type="application/octet-stream")

    async def main():
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        app = web.Application()
        app.router.add_get("/big", big)
        runner = ConnectionLimitedRunner(app, settings=ServerSettings(send_timeout_s={SEND_TIMEOUT_S}))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.Event().wait()
    asyncio.run(main())
""")


@pytest.fixture(scope="module")
def server():
    process = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())
        yield process, port
    finally:
        process.kill()
        process.wait()


def test_clients_that_never_read_cost_at_most_the_bound_each_and_are_closed_after_the_send_timeout(server):
    process, port = server
    rss = psutil.Process(process.pid).memory_info
    baseline = rss().rss
    sockets = []
    for _ in range(CLIENTS):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /big HTTP/1.1\r\nHost: sie\r\n\r\n")
        sockets.append(sock)
    sent = time.monotonic()
    try:
        peak = baseline
        while time.monotonic() - sent < SEND_TIMEOUT_S * 0.8:  # the answers are written and blocked
            peak = max(peak, rss().rss)
        # before: each connection's transport copied what the socket did not take (+170 MiB for 8)
        assert peak - baseline < CLIENTS * WRITE_BUFFER_BYTES + 16 * MiB, (peak - baseline) / MiB
        # then the server closes each (its log says so; reading first would restart the send timer)
        closed = 0
        while closed < CLIENTS and time.monotonic() - sent < SEND_TIMEOUT_S + 10:
            closed += "read none of its answer" in process.stderr.readline()
        closed_after = time.monotonic() - sent
        assert closed == CLIENTS, f"{CLIENTS - closed} connections still open {closed_after:.1f}s after sending"
        assert closed_after >= SEND_TIMEOUT_S
        for sock in sockets:  # what a client reading now gets: the start of its answer, then the end
            sock.settimeout(5)
            received = 0
            try:
                while chunk := sock.recv(1 << 20):
                    received += len(chunk)
            except ConnectionResetError:
                pass
            assert received < ANSWER / 2
    finally:
        for sock in sockets:
            sock.close()


def test_a_client_that_reads_gets_every_byte_over_one_keep_alive_connection(server):
    _, port = server
    expected = bytes(range(256)) * (ANSWER // 256)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for _ in range(2):
            answer = client.get("/big")
            assert answer.status_code == 200 and answer.content == expected
        assert answer.http_version == "HTTP/1.1" and answer.headers.get("Connection") != "close"
