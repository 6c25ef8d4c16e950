"""How the router reads a request: with the engine server's bounds, not softer ones (issue #30.6).

- Bodies are read by server/body.py (idle and total timeouts, 408; the size bound, 413;
  the all-bodies budget of body_budget.py, 429) and forwarded as sent: a compressed body
  keeps its `Content-Encoding` and the worker inflates it. An encoding the workers do not
  take is 415 here, at once.
- A body-routed path (the model in the JSON body: OpenAI's, Cohere's, Infinity's) needs its
  model: the body is inflated on body.py's inflate pool, bounded by the body limit (a gzip
  bomb is 413 without stalling the event loop; a body that is not gzip is 400), and parsed;
  nesting too deep for the parser leaves the model unknown and the worker answers the body.
- `X-SIE-Timeout-Ms` is validated as the engine validates it: a positive, finite number of
  milliseconds, else 400 naming the header.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from ..body import inflate_off_loop, read_raw, request_encoding
from .config import RouterConfig

# Bodies larger than this are parsed off the event loop.
INLINE_PARSE_BYTES = 64 * 1024


async def read_forwarded(request: web.BaseRequest, config: RouterConfig) -> bytes:
    """The body as the client sent it (compressed or not), within the bounds above."""
    request_encoding(request)  # 415 before reading a body no worker would take
    return await read_raw(request, config.max_body_bytes, config.body_idle_timeout_s, config.body_timeout_s)


def routing_model(model: str) -> str:
    """The served model behind a mode alias (`<model>#query`), which picks no other model."""
    base, sep, _ = model.rpartition("#")
    return base if sep and base else model


def _model_in_json(body: bytes) -> str | None:
    try:
        model = json.loads(body).get("model")
    except (ValueError, AttributeError, RecursionError):
        return None  # the worker answers a malformed or too deeply nested body with its own 400
    return routing_model(model) if isinstance(model, str) else None


async def model_in_body(request: web.BaseRequest, body: bytes, config: RouterConfig) -> str | None:
    """The `model` field of a JSON body as sent (inflated first when it is compressed)."""
    encoding = request_encoding(request)
    if body and encoding != "identity":
        body = await inflate_off_loop(body, encoding, config.max_body_bytes)
    if len(body) > INLINE_PARSE_BYTES:
        return await asyncio.to_thread(_model_in_json, body)
    return _model_in_json(body)

