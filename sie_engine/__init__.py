"""SIE's engine as a library: model cards, packed forward passes, heads, token-budget
batching and the model pool. No HTTP in here."""

from .card import Catalog, ModelCard, WeightsSource
from .engine import Engine, parse_bytes
from .errors import SIEError
from .local_card import card_from_local_dir
from .postprocess import Quantized
from .types import EncodedItem, EncodeResult, ModelInfo, SparseVector, Timings

__all__ = [
    "Catalog", "Engine", "EncodedItem", "EncodeResult", "ModelCard", "ModelInfo", "Quantized", "SIEError",
    "SparseVector", "Timings", "WeightsSource", "card_from_local_dir", "parse_bytes",
]
