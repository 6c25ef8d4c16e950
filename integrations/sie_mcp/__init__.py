"""SIE as tools for agents: an MCP server (the official `mcp` SDK) exposing the models an SIE
server serves as five tools (embed, rerank, extract_entities, classify, extract_relations),
each with its models' own descriptions and a JSON Schema for its arguments and answer.

    sie-mcp --url http://127.0.0.1:8080                      # stdio, for an agent host
    sie-mcp --transport streamable-http --port 8000          # http://127.0.0.1:8000/mcp

It talks to SIE over HTTP through `sie_client.AsyncSIEClient` (no torch here). Why one tool
per kind of work rather than per model: see `sie_mcp.tools`.
"""

from __future__ import annotations

from .catalog import Catalog, ServedModel
from .server import SIETools, build_server, serve_http, serve_stdio
from .tools import KINDS, ToolKind

__all__ = ["Catalog", "KINDS", "SIETools", "ServedModel", "ToolKind", "build_server", "serve_http", "serve_stdio"]
