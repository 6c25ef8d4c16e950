"""The README's commands and examples, as written, on this checkout (as `.ci/run` does for
its test command): every shell command is run or checked, every Python example runs
against a server started with the README's own `sie-server serve` line.

Offline, an example may stop at a model whose weights only the Hugging Face Hub has (the
cross-encoder, GLiNER); it must then fail at once with `model_load_failed (not_found)`,
not after a minute of retries, and never for a model that ships offline."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

from checkout import REPO
from server_fixtures import start_server
from sie_server.cli import add_serve_parser, build_parser

README = (REPO / "README.md").read_text()
EXTRAS = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
# The address the README's examples use; the tests put their server's in its place.
README_URLS = ("http://127.0.0.1:8080", "http://localhost:8080", "localhost:8080")
# Models whose weights install with SIE (the server extra, the dev extra): never missing.
OFFLINE_MODELS = ("sentence-transformers/all-MiniLM-L6-v2", "sie/splade-tiny")
OFFLINE_FAILURE = re.compile(r"SIEError: 503 model_load_failed: model '([^']+)' failed to load \(not_found\)")
# Seconds an example may take to import its libraries and fail; retrying a missing model took over 60.
FAIL_FAST_S = 45
# Examples that need a service the test machine does not have, by a line they contain.
NEEDS_SERVICE = {"weaviate.connect_to_local()": "a Weaviate server (tests/integrations/test_integration_weaviate.py "
                                                "runs the adapter against a test server)"}


def fenced(lang: str) -> list[str]:
    """The README's fenced code blocks tagged `lang`, in order."""
    return [m.group(2) for m in re.finditer(r"^```(\w*)\n(.*?)^```", README, re.M | re.S) if m.group(1) == lang]


def http_example() -> str:
    """The HTTP server section's block: install, serve, then curl."""
    return next(block for block in fenced("bash") if "sie-server serve" in block)


def marked(name: str) -> str:
    """The code block between `<!-- name -->` and `<!-- /name -->`."""
    section = README.split(f"<!-- {name} -->", 1)[1].split(f"<!-- /{name} -->", 1)[0]
    return section.strip().strip("`").strip()


def commands(block: str) -> list[list[str]]:
    """Shell commands of a block: continuation lines joined, comments dropped, `&&` split."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            head, words = (words[:words.index("&&")], words[words.index("&&") + 1:]) if "&&" in words else (words, [])
            found.append(head)
    return found


def check_pip_install(words: list[str]) -> None:
    """`pip install` of SIE names the checkout (SIE is not on a package index) and real extras."""
    if "-c" in words:
        assert (REPO / words[words.index("-c") + 1]).is_file(), words
    for target in (w for w in words[2:] if "[" in w):
        where, extras = target.split("[", 1)
        assert where == ".", f"{target}: install SIE from the checkout ('.[...]'); it is on no package index"
        assert set(extras.rstrip("]").split(",")) <= EXTRAS, f"{target}: unknown extra"


def check_script_options(words: list[str]) -> None:
    """A Python script's command line uses only options its --help lists."""
    script = next(w for w in words if w.endswith(".py"))
    usage = subprocess.run([sys.executable, str(REPO / script), "--help"], capture_output=True, text=True,
                           timeout=120, cwd=REPO)
    assert usage.returncode == 0, usage.stderr
    for option in (w.split("=")[0] for w in words if w.startswith("--")):
        assert option in usage.stdout, f"{script} has no {option} ({' '.join(words)})"


def check_command(words: list[str], ran: list[list[str]]) -> None:
    program = Path(words[0]).name
    if program == "pip" and words[1] == "install":
        check_pip_install(words)
    elif program == "sie-server":
        build_parser().parse_args(words[1:])  # argparse exits (SystemExit) on an unknown option or bad value
    elif program.startswith("python") and words[1:3] == ["-m", "venv"]:
        pass  # makes the venv the next command installs into
    elif program.startswith("python") and any(w.endswith(".py") for w in words):
        check_script_options(words)
    elif program == "helm":
        assert (REPO / words[3]).is_dir() and (REPO / words[words.index("-f") + 1]).is_file(), words
    elif program == "curl":
        ran.append(words)  # needs the server: run by test_http_server_example
    else:
        raise AssertionError(f"the README has a command this test does not know how to check: {' '.join(words)}")


def test_every_shell_command_runs_or_checks():
    curls: list[list[str]] = []
    for block in fenced("bash") + [marked("serve")]:
        for words in commands(block):
            check_command(words, curls)
    assert curls, "the HTTP server example's curl command was not found"


def test_every_serve_option_is_documented():
    subparsers = argparse.ArgumentParser().add_subparsers()
    add_serve_parser(subparsers)
    serve = subparsers.choices["serve"]
    options = {flag for action in serve._actions for flag in action.option_strings if flag.startswith("--")}
    options -= {"--help"}
    undocumented = sorted(o for o in options if o not in README)
    assert not undocumented, f"README's options section does not mention {undocumented}"
    documented = set(re.findall(r"`(--[a-z-]+)", README.split("### Options", 1)[1].split("### ", 1)[0]))
    assert documented <= options, f"README documents options serve does not have: {documented - options}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The README's own `sie-server serve ...` line of the HTTP server section, on a free port."""
    line = next(words for words in commands(http_example()) if words[:2] == ["sie-server", "serve"])
    process = start_server(*line[2:], log_dir=tmp_path_factory.mktemp("readme"))
    yield process
    process.stop()


def at(server, text: str) -> str:
    for url in README_URLS:
        text = text.replace(url, server.url if url.startswith("http") else server.url.removeprefix("http://"))
    return text


def test_http_server_example(server):
    for words in commands(http_example()):
        if words[0] == "curl":
            done = subprocess.run([at(server, w) for w in words], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and '"dense"' in done.stdout, done


def python_examples() -> list:
    params = []
    for block in fenced("python"):
        title = block.splitlines()[0]
        needs = [why for line, why in NEEDS_SERVICE.items() if line in block]
        marks = [pytest.mark.skip(reason=f"needs {needs[0]}")] if needs else []
        params.append(pytest.param(block, id=title[:40], marks=marks))
    return params


@pytest.mark.parametrize("block", python_examples())
def test_python_example(block, server, tmp_path):
    (tmp_path / "example.py").write_text(at(server, block))
    started = time.monotonic()
    # a deprecated call the example itself makes (not its libraries' own) fails it
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning:__main__", "example.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        missing = OFFLINE_FAILURE.search(done.stderr.strip().splitlines()[-1])
        assert missing and missing.group(1) not in OFFLINE_MODELS, done.stderr[-3000:]
        assert time.monotonic() - started < FAIL_FAST_S, "a missing model must fail at once, not after retries"
    # `print(...)  # value`: the example says what it prints
    for expected in re.findall(r"^print\(.*\)\s+#\s*(.+)$", block, re.M):
        assert expected.strip() in done.stdout.splitlines(), (expected, done.stdout)
