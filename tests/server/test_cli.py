"""`sie-server` as a user meets it: mistakes on the command line are one line and exit
code 2, a busy port is one line and exit code 1, a closed pipe is quiet; a server says
what it runs on when it starts and quits at a second Ctrl-C during the drain.
(What a running server logs: test_server_logs.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from sie_server.launch import server_command, start_server

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# A request head whose body never comes: its handler waits in flight until the client goes.


def long_request() -> bytes:
    """A whole request that takes many seconds: its model loads first, then 2,000 documents.
    (A half-sent body would not do: a request whose body has not arrived holds no drain.)"""
    from dev_corpus import load_docs

    body = json.dumps({"items": [d["text"] for d in load_docs(2000)]}).encode()
    return (f"POST /v1/encode/{MODEL} HTTP/1.1\r\nHost: sie\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def sie_server(*args: str, stdout=subprocess.PIPE, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(server_command() + list(args), stdout=stdout, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def _one_clean_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("sie-server: ")
    return lines[0]


def test_models_with_a_missing_model_directory(tmp_path):
    done = sie_server("models", "--model", f"x={tmp_path / 'nope'}")
    assert done.returncode == 2
    assert f"--model x={tmp_path / 'nope'}: {tmp_path / 'nope'} does not exist" in _one_clean_line(done.stderr)


def test_models_with_a_typo_in_a_card(tmp_path):
    (tmp_path / "mine.yaml").write_text("id: my/model\nweights: {hub: my/model}\noutputs: [dens]\n")
    done = sie_server("models", "--no-builtin", "--models", str(tmp_path))
    assert done.returncode == 2
    line = _one_clean_line(done.stderr)
    assert "mine.yaml" in line and "'dens'" in line


def test_models_into_a_closed_pipe_is_quiet():
    process = subprocess.Popen(server_command() + ["models", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader is gone before the first line, as `| head` is after its lines
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGPIPE and stderr == ""


def test_serve_on_a_busy_port():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = sie_server("serve", "--port", str(port), stdout=subprocess.DEVNULL)
    assert done.returncode == 1
    line = _one_clean_line(done.stderr)
    assert f"127.0.0.1:{port}" in line and "address already in use" in line and "--port" in line


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # no preload: the catalog's models load on first use. The last test below ends it.
    process = start_server(log_dir=tmp_path_factory.mktemp("cli"))
    yield process
    process.stop()


def test_startup_summary(server):
    summary = next(line for line in server.log_text().splitlines() if "memory budget" in line)
    assert re.search(r"device cpu\b.*memory budget [\d.]+ GiB; host cache \w+.*; \d+ models in the catalog; "
                     r"preloading none", summary), summary


def test_a_second_ctrl_c_during_the_drain_quits_at_once(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(long_request())  # in flight: the drain would wait for it
        time.sleep(0.5)
        server.signal(signal.SIGINT)
        assert "Ctrl-C again" in server.log_containing("Ctrl-C again")
        started = time.monotonic()
        server.signal(signal.SIGINT)
        assert server.wait(timeout=10) == 128 + signal.SIGINT
    assert time.monotonic() - started < 5
    assert "second SIGINT: quitting now, 1 accepted request(s) unanswered" in server.log_text()
