"""Real `sie-server serve` processes forked from an interpreter that has imported torch,
transformers and SIE already: a start costs about a second instead of ten CPU-seconds of imports.

A test suite on two cores starts well over a hundred servers; their imports were most of its
time. This is the fork-server pattern (multiprocessing's forkserver, gunicorn's --preload):
one zygote per test process imports the heavy modules once, touches no torch op and starts no
thread of its own, and forks a child per server. The child is the real server: it takes the
command's environment, output file and arguments and runs `sie_server.cli.main`, as the
`sie-server` script would. The zygote is its parent: it reaps it and tells its exit code.

    process = start_server("--preload", DEFAULT_MODEL)   # server_fixtures.start_server uses this

A command the zygote cannot run as it would run fresh falls back to a plain subprocess: one whose
environment differs from the zygote's in a variable read at import time (HF_*, TRANSFORMERS_*,
torch's and the thread pools' ...), or one that is not `sie-server serve`. SIE_ZYGOTE=0 turns
the zygote off.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time
from typing import IO

from sie_server.launch import popen, server_command

# Variables a module reads when it is imported (huggingface_hub's cache and offline flags,
# torch's and BLAS's thread counts, ...): a child given other values than the zygote's would not
# see them, so such a command starts fresh.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "OPENBLAS",
                        "CUDA", "TOKENIZERS", "PROMETHEUS", "PYTHON", "XDG_", "HOME", "TMPDIR", "LD_")
# What `sie-server serve` imports before it is ready, the slow part first (python -X importtime)
PRELOAD = ("torch", "transformers", "transformers.models.auto.auto_factory",
           "transformers.models.auto.tokenization_auto", "transformers.tokenization_utils_tokenizers",
           "safetensors.torch", "PIL.Image", "sie_server.cli", "sie_server.serve", "sie_server.app",
           "sie_engine.engine", "sie_engine.generation.head")


class ForkedServer:
    """A server the zygote forked, with the `subprocess.Popen` calls `ServerProcess` makes."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str]):
        self._zygote = zygote
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)


class Zygote:
    """The forking interpreter, driven over its stdin and stdout a line of JSON at a time."""

    def __init__(self):
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self._process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         env=self.env)
        self._lock = threading.Lock()
        ready = self._process.stdout.readline()  # type: ignore[union-attr]
        if ready.strip() != b"ready":
            raise RuntimeError(f"the server zygote did not start: {ready!r}")

    def _ask(self, request: dict) -> dict:
        with self._lock:
            self._process.stdin.write(json.dumps(request).encode() + b"\n")  # type: ignore[union-attr]
            self._process.stdin.flush()  # type: ignore[union-attr]
            return json.loads(self._process.stdout.readline())  # type: ignore[union-attr]

    def can_run(self, command: list[str], env: dict[str, str]) -> bool:
        prefix = server_command()
        if command[:len(prefix)] != prefix or command[len(prefix):len(prefix) + 1] != ["serve"]:
            return False
        keys = {k for k in {*env, *self.env} if k.startswith(IMPORT_TIME_PREFIXES)}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def fork(self, command: list[str], env: dict[str, str], log_file: IO[bytes]) -> ForkedServer:
        args = command[len(server_command()):]
        answer = self._ask({"fork": args, "env": env, "log": log_file.name, "cwd": os.getcwd()})
        return ForkedServer(self, answer["pid"], command)

    def exit_code(self, pid: int) -> int | None:
        return self._ask({"poll": pid})["code"]

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()  # type: ignore[union-attr]
            self._process.wait(10)


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def spawn(command: list[str], env: dict[str, str], log_file: IO[bytes]):
    """A `sie_server.launch.start_server` spawn: forked by this process's zygote where it can be."""
    global _zygote
    if os.environ.get("SIE_ZYGOTE", "1") == "0" or not hasattr(os, "fork"):
        return popen(command, env, log_file)
    with _zygote_lock:
        if _zygote is None:
            _zygote = Zygote()
            atexit.register(_zygote.close)
    if not _zygote.can_run(command, env):
        return popen(command, env, log_file)
    return _zygote.fork(command, env, log_file)


# ---- the zygote's side ------------------------------------------------------------------------
def _serve_requests() -> None:
    import gc
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # what the children share is not copied when their collector walks it
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing the zygote prints reaches the replies
    replies.write(b"ready\n")
    codes: dict[int, int] = {}
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if "fork" in request:
            pid = os.fork()
            if pid == 0:
                replies.close()
                _become_server(request)  # does not return
            replies.write(json.dumps({"pid": pid}).encode() + b"\n")
        else:
            pid = request["poll"]
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
            replies.write(json.dumps({"code": codes.get(pid)}).encode() + b"\n")


def _become_server(request: dict) -> None:
    """In the forked child: the `sie-server` script with the request's arguments, environment,
    working folder and output file. Exits through SystemExit, so atexit handlers run."""
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    from sie_server import cli

    sys.argv = ["sie-server", *request["fork"]]
    sys.exit(cli.main(request["fork"]))


if __name__ == "__main__":
    _serve_requests()
