"""What an SIE server serves, as the MCP tools see it: `GET /v1/models` read through
`AsyncSIEClient.request`, filtered to the models whose weights can be loaded and that
`--models` allows, and cached for a few seconds (tools/list and every tools/call read it;
the listing reads the server's file system, so it is not fetched per call)."""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sie_client import AsyncSIEClient

# A served model's description is shown to the agent in the description of the tool that
# takes it: long ones are cut so one verbose card cannot crowd out the others.
MAX_DESCRIPTION = 300


@dataclass(frozen=True)
class ServedModel:
    """One entry of `GET /v1/models`, the fields the tools read."""

    id: str
    tasks: tuple[str, ...]
    outputs: tuple[str, ...]
    description: str = ""
    dense_dims: int | None = None
    matryoshka_dims: tuple[int, ...] = ()
    max_seq_len: int | None = None
    modalities: tuple[str, ...] = ("text",)
    state: str = "available"  # available, loading, loaded, failed
    weights: str = "local"  # local, or download (fetched on first load)

    @classmethod
    def from_entry(cls, raw: Mapping[str, Any]) -> ServedModel:
        dims = raw.get("dims") or {}
        return cls(id=str(raw["id"]), tasks=tuple(raw.get("tasks") or ()), outputs=tuple(raw.get("outputs") or ()),
                   description=" ".join(str(raw.get("description") or "").split()),
                   dense_dims=dims.get("dense"), matryoshka_dims=tuple(raw.get("matryoshka_dims") or ()),
                   max_seq_len=raw.get("max_seq_len"), modalities=tuple(raw.get("modalities") or ("text",)),
                   state=str(raw.get("state") or "available"),
                   weights=str((raw.get("weights") or {}).get("status") or "local"))

    def summary(self, limit: int = MAX_DESCRIPTION) -> str:
        """`id (facts): description`, one line for a tool description, the description cut to `limit`."""
        facts = []
        if self.dense_dims:
            facts.append(f"{self.dense_dims} dims")
        if self.matryoshka_dims:
            facts.append("dims " + "/".join(str(d) for d in self.matryoshka_dims))
        if self.max_seq_len:
            facts.append(f"up to {self.max_seq_len} tokens")
        text = self.description
        if len(text) > limit:
            text = text[:limit - 1].rstrip() + "…"
        head = f"{self.id} ({', '.join(facts)})" if facts else self.id
        return f"{head}: {text}" if text else head


def servable(raw: Mapping[str, Any]) -> bool:
    """A listed model an agent can use: its weights are here or can be fetched on first load
    (`unavailable` ones would fail every call: a package not installed, a hub model offline)."""
    return str((raw.get("weights") or {}).get("status", "local")) != "unavailable"


def allowed(model_id: str, patterns: Sequence[str]) -> bool:
    """`--models` patterns (shell globs, `BAAI/*`); none given allows every model."""
    return not patterns or any(fnmatch.fnmatchcase(model_id, p) for p in patterns)


class Catalog:
    """The served models of one SIE server, re-read at most every `ttl_s` seconds."""

    def __init__(self, client: AsyncSIEClient, patterns: Sequence[str] = (), ttl_s: float = 10.0):
        self.client = client
        self.patterns = tuple(patterns)
        self.ttl_s = ttl_s
        self._models: tuple[ServedModel, ...] | None = None
        self._read_at = 0.0

    async def models(self, refresh: bool = False) -> tuple[ServedModel, ...]:
        """The served models, in the server's order; raises `SIEError` when SIE cannot list them
        (unreachable, or a 401 without a valid API key)."""
        if refresh or self._models is None or time.monotonic() - self._read_at > self.ttl_s:
            answer = await self.client.request("GET", "/v1/models")
            self._models = tuple(ServedModel.from_entry(raw) for raw in answer["data"]
                                 if servable(raw) and allowed(str(raw["id"]), self.patterns))
            self._read_at = time.monotonic()
        return self._models
