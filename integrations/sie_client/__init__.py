"""SIE's Python client: encode, score and extract over the HTTP API (msgpack by
default), or in-process with the embedded engine. No torch unless embedded."""

from .adapters import Clients, connect_async
from .client import DEFAULT_MODEL, EMBEDDED, AsyncSIEClient, SIEClient, connect, resolve_url
from .errors import SIEConnectionError, SIEError, SIETimeoutError
from .retry import RetryPolicy
from .timeouts import Timeouts
from .types import (
    Classification,
    EncodedItem,
    EncodeResult,
    Entity,
    ExtractedItem,
    ExtractResult,
    ModelInfo,
    Page,
    Quantized,
    Region,
    Relation,
    ScoredItem,
    ScoreResult,
    SparseVector,
)

__all__ = [
    "AsyncSIEClient", "Classification", "Clients", "DEFAULT_MODEL", "EMBEDDED", "EncodedItem", "EncodeResult", "Entity",
    "ExtractedItem", "ExtractResult", "ModelInfo", "Page", "Quantized", "Region", "Relation", "RetryPolicy",
    "SIEClient", "SIEConnectionError", "SIEError", "SIETimeoutError", "ScoredItem", "ScoreResult", "SparseVector",
    "Timeouts", "connect", "connect_async", "resolve_url",
]
