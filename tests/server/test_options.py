"""Options declared once (server/options.py, server/router/options.py): the docs' tables, the
settings, the Engine's keywords and the router's config derive from the declarations; every
option reads its `SIE_*` variable (flag > environment > default); a bad value is one line and
exit code 2 before anything heavy loads; `--help` and argument errors answer without torch.
The compat APIs' routes are declared once (server/compat_routes.py) for the server and the router.
(The command line as a user meets it, and a serving process: test_cli.py.)"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import os
import subprocess
import sys
import time

import pytest

from checkout import REPO
from sie_server import compat_routes
from sie_server.cli import main as cli_main
from sie_server.cli import parse
from sie_server.launch import server_command
from sie_server.options import SERVE, UNITS, positive_size, resolve, size
from sie_server.options_docs import doc_sections
from sie_server.router.options import ROUTER
from sie_server.settings import ServerSettings

# --help is argparse alone; the bound is generous for a loaded 2-core box (it takes ~0.3 s)
HELP_BOUND_S = 2.0


def sie_server(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(server_command() + list(args), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def one_line(done: subprocess.CompletedProcess) -> str:
    """A refused command line: exit code 2, one line on stderr, no traceback, no usage block."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1 and "Traceback" not in done.stderr and "usage:" not in done.stderr, done.stderr
    assert lines[0].startswith("sie-server"), lines[0]
    return lines[0]


# ---- the declaration and what derives from it ------------------------------------------------

def test_the_docs_tables_are_the_declaration():
    doc = (REPO / "docs" / "deploy.md").read_text()
    for name, table in doc_sections().items():
        section = doc.split(f"<!-- options:{name} -->\n", 1)[1].split(f"<!-- /options:{name} -->", 1)[0]
        assert section.strip() == table, f"docs/deploy.md's {name} table is stale: " \
                                         "run python -m sie_server.options_docs --write docs/deploy.md"


def test_every_option_has_one_variable_and_help():
    for table in (SERVE, ROUTER):
        variables = [o.variable for o in table]
        assert all(v and v.startswith("SIE_") for v in variables)
        assert len(set(variables)) == len(variables)
        assert all(o.help for o in table)
        assert len({o.flag for o in table}) == len(table)


def test_settings_defaults_are_the_options():
    fields = {f.name: f for f in dataclasses.fields(ServerSettings)}
    declared = {o.target: o for o in SERVE if o.sets == "settings"}
    assert set(declared) <= set(fields)
    # the fields no option sets are the server's own tuning, not a user's choice
    assert set(fields) - set(declared) == {"api_key_poll_s", "offload_bytes"}
    for name, option in declared.items():
        assert fields[name].default == option.default, name


def test_engine_keywords_and_limits_are_real_and_agree_on_defaults():
    from sie_engine import Engine
    from sie_engine.validation import Limits

    signature = inspect.signature(Engine.__init__).parameters
    limits = {f.name: f.default for f in dataclasses.fields(Limits)}
    for option in SERVE:
        if option.sets == "engine":
            assert option.target in signature, option.flag
            if option.target != "max_queue_wait_s":  # unbounded in-process; a server refuses after 30 s
                assert signature[option.target].default == option.default, option.flag
        if option.sets == "limits":
            assert limits[option.target] == option.default, option.flag


def test_router_config_defaults_are_the_options():
    from sie_server.router.config import RouterConfig

    config = {f.name: f for f in dataclasses.fields(RouterConfig)}
    for option in ROUTER:
        if option.sets == "router":
            assert option.target in config, option.flag
            default = config[option.target].default
            if default is dataclasses.MISSING:
                default = config[option.target].default_factory()  # type: ignore[misc]
            assert default == option.default or (not default and not option.default), option.flag


@pytest.mark.parametrize("text", ["8GiB", "8 GiB", "512MB", "1e9", "1.5G", "64MiB", "100", "2TiB", "7kb", "3B"])
def test_sizes_read_as_the_engine_reads_them(text):
    from sie_engine import parse_bytes

    assert size(text) == parse_bytes(text) == positive_size(text)
    assert UNITS is importlib.import_module("sie_engine.sizes").UNITS  # one table for both parsers


# ---- precedence: flag > environment > default --------------------------------------------------

def test_flag_then_environment_then_default():
    environ = {"SIE_HTTP_PORT": "9000", "SIE_MEMORY_BUDGET": "2GiB", "SIE_PRELOAD": "a/b, c/d", "SIE_ACCESS_LOG": "off"}
    args = parse(["serve", "--port", "9100"], environ)
    assert args.port == 9100  # the flag wins
    assert args.memory_budget == 2 * 2**30  # then the variable
    assert args.preload == ("a/b", "c/d")  # a list from a comma-separated variable
    assert args.access_log is False
    assert args.max_items == 4096 and args.host == "127.0.0.1"  # then the default
    assert parse(["serve", "--preload", "x/y"], environ).preload == ("x/y",)  # a flag replaces the list
    assert parse(["serve", "--no-access-log"], {}).access_log is False and parse(["serve"], {}).access_log is True


def test_a_variable_a_flag_overrides_is_not_read():
    # Kubernetes' service links (`SIE_ROUTER_PORT=tcp://10.0.0.1:8080` for a Service `sie-router`)
    # are no option's variable, and a flag makes its own variable irrelevant
    assert all(o.variable not in ("SIE_PORT", "SIE_ROUTER_PORT") for o in (*SERVE, *ROUTER))
    assert parse(["serve", "--max-items", "8"], {"SIE_MAX_ITEMS": "many"}).max_items == 8


def test_api_keys_from_the_environment_are_added_to_the_flags():
    args = parse(["serve", "--api-key", "k1"], {"SIE_API_KEYS": "k2, k3"})
    assert args.api_key == ("k1", "k2", "k3")


def test_router_options_resolve_from_their_variables():
    from sie_server.router.cli import config_from_args

    parser = argparse.ArgumentParser()
    from sie_server.router.cli import add_router_arguments
    add_router_arguments(parser)
    args = parser.parse_args(["--hold-timeout", "7"])
    resolve(args, ROUTER, {"SIE_ROUTER_WORKERS": "a=http://h:1,http://h:2", "SIE_ROUTER_HOLD_TIMEOUT": "9",
                           "SIE_ROUTER_MAX_ATTEMPTS": "3", "SIE_API_KEYS": "k"})
    config = config_from_args(args)
    assert [(w.pool, w.url) for w in config.workers] == [("a", "http://h:1"), (None, "http://h:2")]
    assert config.hold_timeout_s == 7 and config.max_attempts == 3 and config.api_keys == {"k"}


# ---- a bad value: one line, exit code 2 --------------------------------------------------------

@pytest.mark.parametrize("argv, expected", [
    (["serve", "--port", "99999"], "--port 99999: expected a port number from 0 to 65535"),
    (["serve", "--memory-budget", "-1GiB"], "--memory-budget -1GiB: expected a size"),
    (["serve", "--memory-budget", "0"], "--memory-budget 0: expected a size above 0"),
    (["serve", "--memory-budget", "lots"], "--memory-budget lots: expected a size such as 8GiB"),
    (["serve", "--memory-budget", "8", "GiB"], "--memory-budget 8 GiB: a size is one word"),
    (["serve", "--model", "intfloat/e5-small-v2"], "--model intfloat/e5-small-v2: expected NAME=PATH"),
    (["serve", "--max-items", "0"], "--max-items 0: expected a whole number of at least 1"),
    (["serve", "--device", "gpu"], "--device gpu: expected auto, cpu, cuda or cuda:N"),
    (["serve", "--head-timeout", "inf"], "--head-timeout inf: expected a number of seconds (must be > 0, finite)"),
    (["serve", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["router", "--port", "99999"], "--port 99999: expected a port number from 0 to 65535"),
    (["router", "--worker", "h:1"], "--worker h:1: expected [POOL=]http://HOST:PORT"),
    (["router"], "name workers with --worker or --service"),
])
def test_a_bad_value_is_one_line_and_exit_code_2(argv, expected):
    assert expected in one_line(sie_server(*argv))


def test_a_bad_variable_is_one_line_and_exit_code_2():
    line = one_line(sie_server("serve", env={"SIE_HTTP_PORT": "70000"}))
    assert "SIE_HTTP_PORT=70000: expected a port number" in line
    line = one_line(sie_server("router", "--worker", "http://h:1", env={"SIE_ROUTER_RETRY_AFTER": "soon"}))
    assert "SIE_ROUTER_RETRY_AFTER=soon: expected a whole number" in line


def test_a_size_with_a_space_in_one_word_is_read():
    assert parse(["serve", "--memory-budget", "8 GiB"], {}).memory_budget == 8 * 2**30


@pytest.mark.parametrize("config, expected", [
    ("", "config.json is not valid JSON"),
    ("{}", "is not supported; supported: "),
    ('{"architectures": ["NoSuchModel"], "model_type": "nope"}', "['NoSuchModel'] (model_type 'nope') is not"),
])
def test_a_local_model_whose_config_cannot_serve_is_refused_at_start(tmp_path, config, expected, capsys):
    (tmp_path / "config.json").write_text(config)
    # the CLI's own entry point in this process (a fresh interpreter costs seconds of imports each);
    # the installed script is run once below, and by test_cli.py
    for command in ("models", "serve"):
        code = cli_main([command, "--model", f"mine={tmp_path}"])
        refused = subprocess.CompletedProcess([command], code, *capsys.readouterr())
        line = one_line(refused)
        assert line.startswith(f"sie-server: --model mine={tmp_path}: ") and expected in line, line


def test_the_installed_script_refuses_a_local_model_it_cannot_serve(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    line = one_line(sie_server("serve", "--model", f"mine={tmp_path}"))
    assert line.startswith(f"sie-server: --model mine={tmp_path}: ") and "is not supported" in line, line


# ---- start-up: no torch before serving ---------------------------------------------------------

@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["router", "--help"], ["models", "--help"]])
def test_help_answers_at_once(argv):
    started = time.monotonic()
    done = sie_server(*argv)
    elapsed = time.monotonic() - started
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr
    assert elapsed < HELP_BOUND_S, f"sie-server {' '.join(argv)} took {elapsed:.1f}s"


def test_parsing_and_argument_errors_import_no_torch():
    """What `sie-server serve ...`, `router ...` and `models` load before they serve or list."""
    script = ("import json, sys\n"
              "from sie_server.cli import parse\n"
              "parse(['serve', '--port', '0', '--memory-budget', '1GiB', '--preload', 'x/y'])\n"
              "parse(['router', '--worker', 'http://h:1'])\n"
              "from sie_server.cli import build_catalog\n"
              "from sie_engine.weights import locate_weights\n"
              "[locate_weights(card) for card in build_catalog(parse(['models']))]\n"
              "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
              "('torch', 'transformers', 'aiohttp'))))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


# ---- the router: help for every option, one line at start and one at shutdown ------------------

def test_router_help_explains_every_option():
    from sie_server.router.cli import add_router_arguments

    parser = argparse.ArgumentParser()
    add_router_arguments(parser)
    helps = {flag: action.help for action in parser._actions for flag in action.option_strings}
    for option in ROUTER:
        assert helps[option.flag] and option.help in helps[option.flag], option.flag
        assert option.variable in helps[option.flag], option.flag
    listed = sie_server("router", "--help").stdout
    assert all(o.flag in listed for o in ROUTER)


def test_the_router_logs_a_line_at_start_and_at_shutdown(tmp_path):
    from router_fixtures import start_router

    router = start_router(["--worker", "http://127.0.0.1:9"], tmp_path)
    router.stop()
    log = router.log.read_text()
    assert "Running on" not in log and "(Press CTRL+C to quit)" not in log, log  # aiohttp's banner
    assert log.count("SIE router listening on http://127.0.0.1:") == 1, log
    assert log.count("router stopped") == 1 and router.process.returncode == 0, log


# ---- compat routes: declared once, for the server and the router -------------------------------

def test_every_declared_compat_route_has_its_handler():
    names = [r.name for api in compat_routes.APIS for r in api.routes]
    assert len(set(names)) == len(names)
    for api in compat_routes.APIS:
        module = importlib.import_module(f"sie_server.{api.module}")
        for _, _, handler, _ in api.paths():
            assert inspect.iscoroutinefunction(getattr(module, handler)), (api.name, handler)
        assert (api.model == "path") == ("{model" in api.prefix), api.name


def test_the_router_mounts_every_declared_compat_route():
    from sie_server.router import RouterConfig, create_router_app

    routed = {(r.method, r.resource.canonical) for r in create_router_app(RouterConfig()).router.routes()}
    for api in compat_routes.APIS:
        for method, path, _, _ in api.paths():
            assert (method, path.replace(compat_routes.MODEL_MATCH, "{model}")) in routed, (api.name, method, path)


def test_every_declared_compat_route_is_in_the_openapi_document():
    from sie_server.compat_openapi import PATHS

    documented = {(method.upper(), path) for path, operations in PATHS.items() for method in operations}
    for api in compat_routes.APIS:
        if api is compat_routes.OPENAI:
            continue  # SIE's own document describes it (server/openapi.py, test_openapi_replay.py)
        for method, path, _, _ in api.paths():
            # `/weaviate/{model}/vectors/` is the same operation as without its slash
            plain = path.replace(compat_routes.MODEL_MATCH, "{model}").rstrip("/")
            assert (method, plain) in documented, (api.name, path)


def test_the_server_mounts_every_declared_compat_route_and_counts_its_work():
    from sie_engine import Catalog, Engine
    from sie_server import create_app
    from sie_server.state import WORK_ROUTES

    engine = Engine(Catalog(), device="cpu")
    try:
        app = create_app(engine)
        mounted = {(r.method, r.resource.canonical, r.name) for r in app.router.routes()}
        for api in compat_routes.APIS:
            for method, path, _, name in api.paths():
                assert (method, path.replace(compat_routes.MODEL_MATCH, "{model}"), name) in mounted, (api.name, name)
            assert api.work <= app[WORK_ROUTES]
        assert "embeddings" in app[WORK_ROUTES] and "tei_info" not in app[WORK_ROUTES]
    finally:
        engine.close()


def test_the_router_on_a_busy_port_says_so_in_one_line():
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = sie_server("router", "--port", str(port), "--worker", "http://127.0.0.1:9")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"sie-server router: cannot listen on 127.0.0.1:{port}: address already in use" in done.stderr
