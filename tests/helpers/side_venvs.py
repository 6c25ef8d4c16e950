"""Clients that cannot share the test install, each in a venv of its own in the test cache.

infinity_client 0.0.78 needs httpx<0.28 and the test install has 0.28; litellm 1.110.2 needs
botocore, whose python-dateutil<3 conflicts with kubernetes' >=3 (kubernetes-validate, dev extra),
and adds about 230 MB and a minute and a half to the install (measured on the 2-core machine).
infinity_client gets a venv under `$SIE_TEST_CACHE` (or `~/.cache/sie-tests`), made once per
machine under a lock, as checkov's is (helm_tools.checkov_binary); litellm, whose other
dependencies the test install has, an `overlay` folder of litellm alone (boto3 is for its AWS
providers) on the test install's python, about 25 s to make instead of 4 minutes. A test runs a
script there (`run_in_venv`) that talks to a real SIE server and writes what the client parsed as JSON.

    python = side_venv("infinity-client-0.0.78", ("infinity_client==0.0.78", "httpx==0.27.2"))
    answers = run_in_venv(python, SCRIPT, server.url, calls)
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from real_checkpoints import cache_root

DONE = "sie-requirements.txt"  # written last: a venv without it (a build cut short) is built again


def side_venv(name: str, requirements: tuple[str, ...]) -> Path:
    """The python of the venv `<test cache>/<name>` with `requirements` installed (pip, as
    configured on this machine), built on first use; parallel test runs build it once."""
    home = cache_root() / name
    python = home / "bin" / "python"
    wanted = "\n".join(requirements) + "\n"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = home / DONE
        if not (done.exists() and done.read_text() == wanted and python.exists()):
            shutil.rmtree(home, ignore_errors=True)
            venv.EnvBuilder(with_pip=True, clear=True).create(home)
            subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
                           check=True, timeout=900, stdin=subprocess.DEVNULL)
            done.write_text(wanted)
    return python


def overlay(name: str, requirements: tuple[str, ...]) -> Path:
    """A folder `<test cache>/<name>` with `requirements` installed without their dependencies
    (`pip install --no-deps --target`), for the test install's python on PYTHONPATH: a client whose
    dependencies the test install already has, bar a declared pin it does not need for what is
    tested (litellm's boto3, for AWS providers only). Seconds to make, against minutes for a venv
    that installs every dependency again."""
    home = cache_root() / name
    wanted = "\n".join(requirements) + "\n"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = home / DONE
        if not (done.exists() and done.read_text() == wanted):
            shutil.rmtree(home, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                            "--target", str(home), *requirements], check=True, timeout=900, stdin=subprocess.DEVNULL)
            done.write_text(wanted)
    return home


def run_in_venv(python: Path, script: Path, *args: str, stdin: object = None, timeout: float = 240,
                pythonpath: Path | None = None) -> object:
    """Run `script OUT args` with that venv's python, `stdin` sent as JSON, and return the JSON the
    script wrote to the file OUT (a file: clients print banners of their own on stdout). The
    script's output is in the assertion message when it fails."""
    with tempfile.TemporaryDirectory(prefix="side-venv-") as scratch:
        out = Path(scratch) / "out.json"
        # the test process's PYTHONPATH and friends would put the test install's packages in the venv
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        if pythonpath is not None:  # an overlay on the test install's python
            env["PYTHONPATH"] = str(pythonpath)
        done = subprocess.run([str(python), str(script), str(out), *args], input=json.dumps(stdin),
                              capture_output=True, text=True, timeout=timeout, env=env)
        assert done.returncode == 0 and out.exists(), (
            f"{script.name} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return json.loads(out.read_text())
