"""`sie-mcp`: SIE's served models as MCP tools, for an agent.

    sie-mcp [--url URL] [--api-key KEY] [--models PATTERN ...] [--timeout S]
            [--transport stdio|streamable-http] [--host 127.0.0.1] [--port 8000] [--path /mcp]

stdio (the default) is for an agent host that starts the server itself (Claude Desktop,
Claude Code, an agent framework's MCP client); streamable HTTP serves any number of agents
at `http://HOST:PORT/mcp`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from sie_client.environment import api_key_from_env, url_from_env

from .server import SIETools, build_server, serve_http, serve_stdio

DEFAULT_URL = "http://127.0.0.1:8080"  # sie-server serve's own default


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sie-mcp", description="Serve the models of an SIE server as MCP tools: embed, "
                                "rerank, extract_entities, classify and extract_relations.")
    p.add_argument("--url", default=url_from_env() or DEFAULT_URL,
                   help=f"the SIE server or router (default: SIE_URL, else {DEFAULT_URL})")
    p.add_argument("--api-key", default=api_key_from_env(),
                   help="sent to SIE as Authorization: Bearer (default: SIE_API_KEY); over HTTP, a caller's own "
                        "Bearer token replaces it")
    p.add_argument("--models", action="append", default=[], metavar="PATTERN",
                   help="only these served models become tools' choices: ids or shell globs (BAAI/*), repeated or "
                        "comma-separated (default: every model SIE serves)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request to SIE (default 60)")
    p.add_argument("--transport", choices=("stdio", "streamable-http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1",
                   help="streamable-http: the address to listen on (default 127.0.0.1; the server holds the SIE key, "
                        "so listen beyond loopback only behind your own access control)")
    p.add_argument("--port", type=int, default=8000, help="streamable-http: the port (default 8000; 0 picks one)")
    p.add_argument("--path", default="/mcp", help="streamable-http: the endpoint's path (default /mcp)")
    return p


def patterns(values: Sequence[str]) -> list[str]:
    return [p.strip() for value in values for p in value.split(",") if p.strip()]


async def serve(args: argparse.Namespace) -> None:
    tools = SIETools(args.url, api_key=args.api_key or None, models=patterns(args.models), timeout=args.timeout)
    server = build_server(tools)
    try:
        if args.transport == "stdio":
            await serve_stdio(server)
        else:
            await serve_http(server, args.host, args.port, args.path)
    finally:
        await tools.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.url.startswith(("http://", "https://")):
        parser().error(f"--url must start with http:// or https://, got {args.url!r}")
    # stdout is the protocol on stdio: everything else goes to stderr
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="sie-mcp %(levelname)s %(message)s")
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
