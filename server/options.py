"""Every option of `sie-server serve` and `sie-server models`, declared once.

An `Option` names its flag, the parser that reads and checks its value (a `ValueError` from it
says what is accepted), its default, its `SIE_*` environment variable, its help text and where
the value goes (`sets`): a `ServerSettings` field, an `Engine` keyword, a `validation.Limits`
field, or the command line itself (the catalog, logging). From `SERVE` and `CATALOG` derive the
argparse options (server/cli.py), `ServerSettings`' defaults (server/settings.py), the keywords
the CLI passes to `Engine` and the options tables of docs/deploy.md (options_docs.py writes
them; tests/server/test_options.py checks them). The router's options are declared the same way in
server/router/options.py.

Precedence: a flag on the command line, else its environment variable, else the default. A
repeatable option reads a comma-separated list from its variable. `--api-key` is the one
exception: the keys of SIE_API_KEYS are accepted besides those of the flags (one Secret serves
the router and the engines).

This module imports nothing heavy: `--help` and argument errors answer before torch loads.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from sie_engine.sizes import UNITS  # torch-free: the engine's own table of units

Target = Literal["settings", "engine", "limits", "cli", "router"]


@dataclass(frozen=True)
class Option:
    """One command-line option: `--flag VALUE`, a repeatable one, or a switch without a value."""

    flag: str
    help: str
    # text -> value; raises ValueError saying what is accepted (the message follows "--flag TEXT: ")
    parse: Callable[[str], Any] = str
    default: Any = None
    # where the value goes, and under which name there (None: the option's dest)
    sets: Target = "cli"
    field: str | None = None
    metavar: str | None = None
    repeat: bool = False  # repeatable: the value is a tuple of every occurrence
    switch: bool | None = None  # a flag without a value that sets this value (--no-access-log: False)
    env: str | None = ""  # "": SIE_<DEST>; None: no variable
    # the environment's values are accepted besides the flags' (SIE_API_KEYS), instead of being overridden
    env_adds: bool = False
    # the default as the docs say it, where it is computed at start (the memory budget)
    default_text: str | None = None
    dest_name: str | None = None

    @property
    def dest(self) -> str:
        return self.dest_name or self.flag.lstrip("-").replace("-", "_")

    @property
    def target(self) -> str:
        """The `ServerSettings` field, `Engine` keyword or `Limits` field the value sets."""
        return self.field or self.dest

    @property
    def variable(self) -> str | None:
        return ("SIE_" + self.dest.upper()) if self.env == "" else self.env

    def describe_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if self.repeat or self.default in (None, ()):
            return "none"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, tuple):
            return ",".join(map(str, self.default))
        return _size_text(self.default) if self.parse is size or self.parse is positive_size else str(self.default)


class OptionError(Exception):
    """A value that does not parse or check: the message is the whole line a user reads."""


# ---- parsers: text -> value, ValueError with what is accepted ------------------------------

_SIZE = re.compile(r"^([0-9]*\.?[0-9]+(?:E[+-]?[0-9]+)?)([KMGT]I?B?|B)?$")
SIZE_EXAMPLES = "a size such as 8GiB, 512MB or 1e9 (bytes)"


def _bytes(text: str) -> int:
    match = _SIZE.match(text.strip().upper().replace(" ", ""))
    if not match or (match.group(2) or "") not in UNITS:
        raise ValueError(f"expected {SIZE_EXAMPLES}")
    value = float(match.group(1)) * UNITS[match.group(2) or ""]
    if not math.isfinite(value):
        raise ValueError(f"expected {SIZE_EXAMPLES}")
    return int(value)


def size(text: str) -> int:
    """A number of bytes, 0 or more: `0`, `8GiB`, `512MB`, `1e9`."""
    return _bytes(text)


def positive_size(text: str) -> int:
    """A number of bytes above 0."""
    value = _bytes(text)
    if value <= 0:
        raise ValueError(f"expected a size above 0, {SIZE_EXAMPLES}")
    return value


def _size_text(value: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale}{unit}"
    return str(value)


def count(minimum: int = 1) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise ValueError(f"expected a whole number of at least {minimum}")
        return value
    parse.__name__ = f"count_from_{minimum}"
    return parse


def seconds(zero: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (value >= 0 if zero else value > 0) or value == math.inf:
            raise ValueError(f"expected a number of seconds (must be {'>= 0' if zero else '> 0'}, finite)")
        return value
    parse.__name__ = "seconds_from_zero" if zero else "seconds"
    return parse


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise ValueError("expected a port number from 0 to 65535 (0: any free port)")
    return value


def device(text: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", text):
        raise ValueError("expected auto, cpu, cuda or cuda:N")
    return text


def choice(*names: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in names:
            raise ValueError(f"expected one of {', '.join(names)}")
        return text.lower()
    parse.__name__ = "choice"
    return parse


def switch_value(text: str) -> bool:
    """A switch's environment variable: 1/true/yes/on or 0/false/no/off."""
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1, true, yes, on or 0, false, no, off")


def model_spec(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ValueError("expected NAME=PATH, a local Hugging Face-layout directory served as NAME (a model of "
                         "the catalog needs no --model: `sie-server models` lists them, and they load on first use)")
    return name, path


def image_formats(text: str) -> tuple[str, ...]:
    names = tuple(f.strip().upper() for f in text.split(",") if f.strip())
    if not names or not all(re.fullmatch(r"[A-Z0-9]+", n) for n in names):
        raise ValueError("expected a comma-separated list of image formats, e.g. PNG,JPEG,WEBP")
    return names


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise ValueError("does not exist (give a file of keys, one per line)")
    return path


def directory(text: str) -> Path:
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError("is not a directory (give a directory; it is created if missing)")
    return path


def nats_url(value: str) -> str:
    """`nats://HOST:PORT` (or tls://; several comma-separated for a cluster)."""
    for url in value.split(","):
        parts = urlsplit(url.strip())
        if parts.scheme not in ("nats", "tls") or not parts.hostname:
            raise ValueError("expected nats://HOST:PORT (tls:// for TLS; comma-separated for several)")
    return value


def text(value: str) -> str:
    if not value.strip():
        raise ValueError("expected a non-empty value")
    return value


# ---- the tables ---------------------------------------------------------------------------

CATALOG: tuple[Option, ...] = (
    Option("--models", "a directory of model cards (YAML) served besides the built-in catalog; repeatable",
           text, repeat=True, metavar="DIR"),
    Option("--model", "serve a local Hugging Face-layout directory under NAME, without a card; repeatable",
           model_spec, repeat=True, metavar="NAME=PATH", env="SIE_LOCAL_MODELS"),
    Option("--no-builtin", "do not serve the built-in catalog", switch_value, default=False, switch=True),
)

SERVE: tuple[Option, ...] = (
    Option("--host", "address to bind (0.0.0.0 for all interfaces)", text, "127.0.0.1", "settings"),
    # not SIE_PORT: Kubernetes gives every pod `<SERVICE>_PORT=tcp://...` for each Service of its
    # namespace (enableServiceLinks), which a Service named `sie` would turn into SIE_PORT
    Option("--port", "port (0: any free port, printed at start)", port, 8080, "settings", env="SIE_HTTP_PORT"),
    *CATALOG,
    Option("--preload", "load this model before /readyz turns ready; repeatable", text, (), "settings",
           repeat=True, metavar="ID"),
    Option("--device", "auto, cpu, cuda or cuda:N", device, "auto", "engine"),
    Option("--memory-budget", "memory for resident models, e.g. 8GiB", positive_size, None, "engine",
           metavar="SIZE", default_text="90% of the GPU, half the RAM on CPU"),
    Option("--host-cache", "host RAM that keeps evicted models warm for fast swap-in", size, None, "engine",
           metavar="SIZE", default_text="min(8GiB, 25% of RAM) with CUDA, 0 on CPU"),
    Option("--api-key", "require `Authorization: Bearer KEY`; repeatable (SIE_API_KEYS: comma-separated, "
           "accepted besides the flags' keys)", text, (), "settings", "api_keys", metavar="KEY", repeat=True,
           env="SIE_API_KEYS", env_adds=True),
    Option("--api-key-file", "file of API keys, one per line; re-read when it changes", existing_file, None,
           "settings", metavar="PATH"),
    Option("--admin-key-file", "file of admin keys, one per line, for the admin API (/v1/configs/models); re-read "
           "when it changes; without it the admin API answers 403", existing_file, None, "settings",
           metavar="PATH"),
    Option("--config-dir", "where cards added with the admin API persist (read back at start, so a restarted "
           "pod serves the same models)", directory, None, "settings", metavar="DIR",
           default_text="none: runtime cards are lost with the process"),
    Option("--pin", "never evict this model once loaded (a load that needs its memory is refused out_of_memory); "
           "repeatable", text, (), "engine", "pinned", metavar="ID", repeat=True),
    Option("--idle-evict-s", "unload a model after this many seconds without a batch (a card's idle_evict_s wins; "
           "0 there: never)", seconds(), None, "engine", "idle_evict_s", metavar="SECONDS",
           default_text="off"),
    Option("--pool", "the pool this server belongs to (reported to the router; in queue mode the stream it pulls "
           "from)", text, "default", "settings", metavar="NAME"),
    Option("--queue", "queue mode: pull work of --pool from this NATS JetStream server (the router's --queue) "
           "besides serving HTTP; needs the `queue` extra", nats_url, None, "settings", "queue_url", metavar="URL",
           default_text="off: direct mode only"),
    Option("--queue-concurrency", "queue mode: messages this server works on at once, at most (admission "
           "decides first: no message is pulled while the queue wait is over --max-queue-wait)", count(), 64,
           "settings", metavar="N"),
    Option("--max-queued-tokens", "tokens a model may have queued before requests get 429", count(), 1 << 20,
           "engine", metavar="N"),
    Option("--max-total-queued-tokens", "tokens all models together may have queued before requests get 429",
           count(), 1 << 22, "engine", metavar="N"),
    Option("--max-queue-wait", "admit a request only if the work queued before it finishes within this many "
           "seconds at the measured throughput, else 429 at once with Retry-After", seconds(), 30.0, "engine",
           "max_queue_wait_s", metavar="SECONDS"),
    Option("--max-items", "items per request", count(), 4096, "limits", metavar="N"),
    # 32 MiB: the largest image item (--max-image-bytes 20 MiB, 27 MiB in base64) with room for the rest of
    # its request; 4,096 texts of 8 KB each fit too. TEI's 2 MB would refuse one photo (docs/deploy.md).
    Option("--max-body-bytes", "request body limit", positive_size, 32 * 2**20, "settings", metavar="SIZE"),
    Option("--max-buffered-body-bytes", "request bodies of all connections together held in memory while they "
           "arrive and are handled (more: 429 with Retry-After)", positive_size, 256 * 2**20, "settings",
           metavar="SIZE"),
    Option("--max-image-bytes", "encoded bytes per image item (more: 413)", positive_size, 20 * 2**20, "limits",
           metavar="SIZE"),
    Option("--max-image-pixels", "width x height per image, read from its header before decoding (more: 413)",
           count(), 50_000_000, "limits", metavar="N"),
    Option("--max-document-bytes", "encoded bytes per document (PDF) item (more: 413)", positive_size, 20 * 2**20,
           "limits", metavar="SIZE"),
    Option("--max-document-pages", "pages rendered per document item, read from its page count before rendering "
           "(more: 413)", count(), 64, "limits", metavar="N"),
    Option("--max-page-pixels", "width x height of a rendered document page, from its page box before rendering "
           "(a larger page is rendered at a lower scale)", count(), 1 << 23, "limits", metavar="N"),
    Option("--max-document-inflated-bytes", "bytes a document's compressed streams (images aside) may inflate to, "
           "checked before rendering (more: 413)", positive_size, 32 * 2**20, "limits", metavar="SIZE"),
    Option("--max-video-bytes", "encoded bytes per video item (more: 413)", positive_size, 20 * 2**20, "limits",
           metavar="SIZE"),
    Option("--max-video-frames", "frames per video item, read from its container or counted from its packets "
           "before decoding (more: 413)", count(), 36_000, "limits", metavar="N"),
    Option("--max-video-pixels", "frames x width x height decoded per video item, checked before decoding "
           "(more: 413; the default is 20 minutes of 1080p at 30 frames a second)", count(), 36_000 * 1920 * 1080,
           "limits", metavar="N"),
    Option("--image-formats", "comma-separated image formats Pillow may decode (others: 400)", image_formats,
           ("PNG", "JPEG", "WEBP", "GIF", "BMP"), "limits", metavar="LIST"),
    Option("--max-connections", "client connections served at once; more get 503 with Retry-After", count(),
           1024, "settings", metavar="N"),
    Option("--probe-connections", "connections beyond --max-connections kept just long enough to answer /healthz "
           "and /readyz (probes are answered even when the server is full)", count(0), 16, "settings",
           metavar="N"),
    Option("--head-timeout", "a request head must arrive whole within this long of its first byte, else the "
           "connection is closed", seconds(), 10.0, "settings", "head_timeout_s", metavar="SECONDS"),
    Option("--keepalive-timeout", "how long a connection may wait for its next request (a new one: for its first) "
           "before it is closed", seconds(), 15.0, "settings", "keepalive_timeout_s", metavar="SECONDS"),
    Option("--body-idle-timeout", "longest pause while a request body arrives (then 408 and the connection is "
           "closed)", seconds(), 30.0, "settings", "body_idle_timeout_s", metavar="SECONDS"),
    Option("--body-timeout", "longest time a whole request body may take to arrive (then 408)", seconds(), 120.0,
           "settings", "body_timeout_s", metavar="SECONDS"),
    Option("--send-timeout", "longest a connection may leave an answer unread (its buffer full) before it is "
           "closed", seconds(), 30.0, "settings", "send_timeout_s", metavar="SECONDS"),
    Option("--cors-origin", "allow browser calls from this origin (CORS; off by default; '*' for any); "
           "repeatable", text, (), "settings", "cors_origins", metavar="ORIGIN", repeat=True,
           env="SIE_CORS_ORIGINS"),
    Option("--no-access-log", "do not log one line per request (with its request id)", switch_value, True,
           "settings", switch=False, dest_name="access_log",
           default_text="access log on"),
    Option("--drain-timeout", "after SIGTERM, how long accepted requests may take; those still queued then are "
           "answered 503 draining (keep it above --max-queue-wait plus one batch)", seconds(zero=True), 120.0,
           "settings", "drain_timeout_s", metavar="SECONDS"),
    Option("--tokenizer-threads", "threads that tokenise requests, beside the batches that run the models",
           count(), 2, "engine", metavar="N"),
    Option("--cpu-batches", "batches run side by side on CPU, each on a share of torch's threads", count(), None,
           "engine", metavar="N", default_text="2"),
    Option("--cuda-batches", "batches in flight on a GPU, each on a CUDA stream of its own, so one batch's host "
           "work overlaps another's kernels", count(), None, "engine", metavar="N", default_text="2"),
    Option("--frontends", "HTTP frontend processes beside one engine-core process (server/split/: HTTP, body "
           "decoding and answer encoding scale over cores; the engine owns pool, admission and batches); 0 serves "
           "everything in one process", count(minimum=0), 0, metavar="N", default_text="0 (one process)"),
    Option("--log-level", "debug, info, warning or error", choice("debug", "info", "warning", "error"), "info",
           metavar="LEVEL"),
)


def by_dest(options: Iterable[Option]) -> dict[str, Option]:
    return {o.dest: o for o in options}


def default_of(options: Iterable[Option], sets: Target, target: str) -> Any:
    """The declared default of the option that sets `target` (a ServerSettings field, ...)."""
    for option in options:
        if option.sets == sets and option.target == target:
            return option.default
    raise KeyError(f"no option sets {sets} {target!r}")


def targets(options: Iterable[Option], values: Mapping[str, Any], sets: Target) -> dict[str, Any]:
    """The resolved values of the options that set `sets`, by the name they set there."""
    return {o.target: values[o.dest] for o in options if o.sets == sets}


# ---- argparse -----------------------------------------------------------------------------

class ArgumentParser(argparse.ArgumentParser):
    """argparse whose mistakes are one line, `<program>: <what is wrong and what is accepted>`, exit
    code 2: no usage block, which hides the line that matters below a screen of options."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # `--memory-budget -1GiB` is a (wrong) value, not an unknown option: read anything that
        # starts as a negative number as a value, so its own check can say what is accepted
        self._negative_number_matcher = re.compile(r"^-\.?[0-9]")

    def error(self, message: str) -> None:  # type: ignore[override]
        # `argument --port: --port 99999: expected ...`: the option already says which it is
        message = re.sub(r"^argument (\S+): (?=\1 )", "", message)
        print(f"{self.prog.split()[0]}: {message}", file=sys.stderr)
        sys.exit(2)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            self.error(explain_extras(extras, argv))
        return parsed


def explain_extras(extras: list[str], argv: list[str]) -> str:
    """`unrecognized arguments`, with the likely cause when a size was written as two words."""
    first = extras[0]
    if first in argv:
        at = argv.index(first)
        if at >= 2 and argv[at - 2].startswith("--") and first.upper() in UNITS:
            return (f"{argv[at - 2]} {argv[at - 1]} {first}: a size is one word, without a space "
                    f"({argv[at - 1]}{first}), or quoted")
    return f"unrecognized arguments: {' '.join(extras)} (--help lists the options)"


def _argparse_type(option: Option) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        try:
            return option.parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{option.flag} {value}: {exc}") from None
    parse.__name__ = option.dest  # argparse names the type in some messages
    return parse


def add_arguments(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """One argparse option per declared option. Every default is None here: `resolve` tells an
    option the command line did not give from one it gave, and takes the environment's value."""
    for option in options:
        extra = f"; env {option.variable}" if option.variable else ""
        help_text = f"{option.help} (default: {option.describe_default()}{extra})".replace("%", "%%")
        if option.switch is not None:
            parser.add_argument(option.flag, dest=option.dest, action="store_const", const=option.switch,
                                default=None, help=help_text)
        else:
            parser.add_argument(option.flag, dest=option.dest, type=_argparse_type(option), default=None,
                                action="append" if option.repeat else "store", metavar=option.metavar,
                                help=help_text)


def resolve(args: argparse.Namespace, options: Iterable[Option],
            environ: Mapping[str, str] = os.environ) -> None:
    """Fill every option the command line did not give from its environment variable, else its
    default (flag > environment > default). Raises OptionError for a variable that does not parse."""
    for option in options:
        given = getattr(args, option.dest, None)
        raw = environ.get(option.variable) if option.variable else None
        from_env: Any = None
        overridden = given is not None and not option.env_adds  # a flag given: its variable is not read
        if raw is not None and raw.strip() and not overridden:
            parse = switch_value if option.switch is not None else option.parse
            try:
                if option.repeat:
                    from_env = tuple(parse(part.strip()) for part in raw.split(",") if part.strip())
                else:  # a switch's variable names its value: SIE_ACCESS_LOG=off, SIE_NO_BUILTIN=1
                    from_env = parse(raw)
            except ValueError as exc:
                raise OptionError(f"{option.variable}={raw}: {exc}") from None
        if option.repeat:
            flags = tuple(given or ())
            value: Any = (flags + (from_env or ())) if option.env_adds else (flags or from_env or ())
        else:
            value = given if given is not None else from_env if from_env is not None else option.default
        setattr(args, option.dest, value)


# ---- docs ---------------------------------------------------------------------------------

def markdown_table(options: Iterable[Option]) -> str:
    """The options as docs/deploy.md lists them."""
    rows = ["| option | environment | default | meaning |", "| --- | --- | --- | --- |"]
    for o in options:
        flag = f"`{o.flag}`" if o.switch is not None else f"`{o.flag} {o.metavar or o.dest.upper()}`"
        flag += " (repeatable)" if o.repeat else ""
        variable = f"`{o.variable}`" if o.variable else "-"
        meaning = o.help.replace("|", "\\|")
        rows.append(f"| {flag} | {variable} | {o.describe_default()} | {meaning} |")
    return "\n".join(rows)
