"""The MCP server: the SDK's low-level `Server` (which takes each tool's JSON Schema as
given) over `SIETools`, served on stdio or streamable HTTP.

Every call is answered: arguments the tool's schema refuses, an unknown model, SIE's
own 4xx (its code and message), SIE unreachable and any other failure become a tool
result with `isError` and a message that says what to change, so the agent can correct
itself and the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from collections import OrderedDict
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import mcp.types as types
from jsonschema import Draft202012Validator
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from starlette.requests import Request

from sie_client import AsyncSIEClient, RetryPolicy, SIEConnectionError, SIEError

from .catalog import Catalog, ServedModel
from .tools import KINDS, ToolArgumentError, ToolKind, description, input_schema

log = logging.getLogger("sie_mcp")

# A tool call is an agent's turn waiting: retry an overloaded or restarting SIE briefly,
# not for the client's default minute (the agent sees the error and can try again).
AGENT_RETRY = RetryPolicy(max_attempts=3, max_total_wait_s=10.0)
# HTTP callers may each bring their own SIE key: one client (connection pool, catalog) per
# key, the least recently used closed beyond this many.
MAX_CALLER_KEYS = 32
READ_ONLY = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                  open_world_hint=False)


def tool_error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def sie_error_text(error: SIEError) -> str:
    if isinstance(error, SIEConnectionError):
        return error.message
    if error.status == 401:
        return (f"SIE refused the API key (401 {error.code}): {error.message}. Start sie-mcp with --api-key (or "
                "SIE_API_KEY), or send the key as `Authorization: Bearer` on the MCP HTTP request")
    if error.retryable:  # still overloaded or starting after AGENT_RETRY's tries: the agent may try later
        later = f" in {error.retry_after:g} s" if error.retry_after else " later"
        return f"SIE is busy ({error.status} {error.code}): {error.message}; try again{later}"
    return f"SIE refused the call ({error.status} {error.code}): {error.message}"


def argument_errors(kind: ToolKind, schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """What is wrong with the arguments, by field (None when the schema admits them)."""
    errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    lines = []
    for error in errors[:5]:
        where = ".".join(str(p) for p in error.absolute_path)
        if where == "model" and error.validator == "enum":
            lines.append(f"unknown model {error.instance!r} for {kind.name}; its models: "
                         f"{', '.join(map(str, error.validator_value))}")
        else:
            lines.append(f"{where or 'arguments'}: {error.message}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return f"invalid arguments for {kind.name}: " + "; ".join(lines) + more


class SIETools:
    """The tools over one SIE server (or router): listed from what it serves, validated against
    their schemas, answered through `AsyncSIEClient`.

    `api_key` is sent to SIE as Bearer; a call may bring its own (the MCP HTTP request's
    `Authorization`), which then replaces it. `models` are `--models` patterns.
    """

    def __init__(self, url: str, *, api_key: str | None = None, models: Sequence[str] = (),
                 timeout: float | None = 60.0, retry: RetryPolicy = AGENT_RETRY, catalog_ttl_s: float = 10.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"SIE url must start with http:// or https://, got {url!r}")
        self.url = url
        self.api_key = api_key
        self.patterns = tuple(models)
        self.timeout = timeout
        self.retry = retry
        self.catalog_ttl_s = catalog_ttl_s
        self._connections: OrderedDict[str | None, tuple[AsyncSIEClient, Catalog]] = OrderedDict()

    async def _connection(self, api_key: str | None) -> tuple[AsyncSIEClient, Catalog]:
        key = api_key or self.api_key
        if key in self._connections:
            self._connections.move_to_end(key)
            return self._connections[key]
        # "" rather than None: the client would otherwise read SIE_API_KEY itself, and the
        # key to use has been settled here (the --api-key default is that variable already)
        client = AsyncSIEClient(self.url, api_key=key or "", timeout=self.timeout, retry=self.retry)
        self._connections[key] = (client, Catalog(client, self.patterns, self.catalog_ttl_s))
        while len(self._connections) > MAX_CALLER_KEYS:
            # a call still running on the evicted client fails as a tool error (rare: it is the
            # least recently used of MAX_CALLER_KEYS keys); its caller's next call gets a new one
            _, (old, _) = self._connections.popitem(last=False)
            await old.close()
        return self._connections[key]

    async def list_tools(self, api_key: str | None = None) -> list[types.Tool]:
        """A tool per kind some served model does; all five, taking any model id, when SIE
        cannot list its models (the calls then say why)."""
        _, catalog = await self._connection(api_key)
        served: Sequence[ServedModel] | None
        try:
            served, problem = await catalog.models(), None
        except SIEError as error:
            served, problem = None, sie_error_text(error)
            log.warning("listing tools without SIE's models: %s", problem)
        tools = []
        for kind in KINDS:
            schema = input_schema(kind, served)
            if schema is not None:
                tools.append(types.Tool(name=kind.name, title=kind.title, input_schema=schema,
                                        description=description(kind, served, problem),
                                        output_schema=kind.output_schema, annotations=READ_ONLY))
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any] | None,
                        api_key: str | None = None) -> types.CallToolResult:
        kind = next((k for k in KINDS if k.name == name), None)
        if kind is None:
            return tool_error(f"no tool {name!r}; the tools are {', '.join(k.name for k in KINDS)}")
        try:
            return await self._call(kind, dict(arguments or {}), api_key)
        except SIEError as error:
            return tool_error(sie_error_text(error))
        except ToolArgumentError as error:
            return tool_error(f"invalid arguments for {kind.name}: {error}")
        except Exception as error:  # a bug here must cost one call, never the server
            log.exception("tool %s failed", name)
            return tool_error(f"sie-mcp failed on this call ({type(error).__name__}: {error})")

    async def _call(self, kind: ToolKind, arguments: dict[str, Any], api_key: str | None) -> types.CallToolResult:
        client, catalog = await self._connection(api_key)
        served = await catalog.models()
        if arguments.get("model") is not None and arguments["model"] not in {m.id for m in served}:
            served = await catalog.models(refresh=True)  # perhaps a model added since the last listing
        schema = input_schema(kind, served)
        if schema is None:
            return tool_error(f"SIE at {self.url} serves no model for {kind.name} now")
        problem = argument_errors(kind, schema, arguments)
        if problem is not None:
            return tool_error(problem)
        model_id = arguments.pop("model", None) or schema["properties"]["model"]["default"]
        model = next(m for m in served if m.id == model_id)
        answer = await kind.run(client, model, arguments, served)
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer, ensure_ascii=False))],
                                    structured_content=answer)

    async def close(self) -> None:
        while self._connections:
            _, (client, _) = self._connections.popitem()
            await client.close()


def caller_key(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The SIE key an MCP HTTP request brings as `Authorization: Bearer` (stdio brings none)."""
    if not isinstance(ctx.request, Request):
        return None
    scheme, _, token = ctx.request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _version() -> str:
    try:
        return metadata.version("sie")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


def build_server(tools: SIETools) -> Server[Any]:
    """The MCP server over `tools` (no transport yet: see `serve_stdio` / `serve_http`)."""

    async def on_list_tools(ctx: ServerRequestContext[Any, Any],
                            params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await tools.list_tools(caller_key(ctx)))

    async def on_call_tool(ctx: ServerRequestContext[Any, Any],
                           params: types.CallToolRequestParams) -> types.CallToolResult:
        return await tools.call_tool(params.name, params.arguments, caller_key(ctx))

    return Server("sie", version=_version(), title="SIE: small models as tools",
                  instructions="Embedding, reranking and zero-shot extraction (entities, classes, relations) with "
                               f"the small models served by SIE at {tools.url}. Each tool lists its models.",
                  on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def bind(host: str, port: int) -> socket.socket:
    """A listening socket bound before serving, so port 0 gives a port that can be announced."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


async def serve_http(server: Server[Any], host: str, port: int, path: str = "/mcp") -> None:
    """Streamable HTTP at `http://host:port{path}`, one line on stderr saying where once it listens.

    Stateless with JSON answers: a call is one request and one answer (nothing streams), so
    any replica behind a load balancer can take any call."""
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=path, stateless_http=True, json_response=True, host=host)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"sie-mcp: MCP over streamable HTTP at http://{shown}:{bound}{path}", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])
