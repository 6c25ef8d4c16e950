"""How many values a JSON body holds, counted on its bytes before anything is parsed.

msgspec checks a JSON array's `max_length` only once the whole array is decoded (msgpack
states the length first, so there the bound stops the decoder at once), and decoding holds
the GIL, so the event loop waits even while a worker thread decodes: 30 MiB of `{},` still
made 10 million dicts (+750 MiB) before the bound refused them, and `/healthz` waited 7 s
(issue #30.3). So a JSON body's values and containers are counted first, and a body over
MAX_VALUES or MAX_CONTAINERS is refused before a parser sees it.

The count: commas, `[` and `{` outside strings, plus one (every value but the first of a
list or an object follows a comma; a key and its value count as one). A plain count of those
bytes (strings included, about 5 ms per MiB) decides almost every body; only one whose bytes
pass a bound is counted exactly, strings masked out by their quotes' running parity (numpy,
about 25 ms per MiB on the 2-core box, a few bytes per byte of body).
"""

from __future__ import annotations

import numpy as np

from sie_engine.errors import PayloadTooLarge

# The most values and the most lists and objects a body may hold, whatever its size. A request of
# 4,096 items with 16 entities each holds about 330,000 values in 70,000 objects; 4,096 long texts
# hold a few thousand. Decoding holds the GIL (the event loop waits, even with the decoder on a
# thread): half a million values are about 50 ms of it, ten million were seconds.
MAX_VALUES = 1 << 19
MAX_CONTAINERS = 1 << 17

_QUOTE, _BACKSLASH, _COMMA, _OPEN_LIST, _OPEN_OBJECT = (ord(c) for c in '"\\,[{')


def count_values(raw: bytes) -> tuple[int, int]:
    """(values, lists and objects) in `raw` (JSON), strings' contents not counted; exact for valid JSON."""
    # an escaped quote or backslash is not a delimiter: drop both kinds of escape first
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in raw else raw
    data = np.frombuffer(text, dtype=np.uint8)
    # inside a string after an odd number of quotes: parity survives uint8 overflow
    outside = (np.cumsum(data == _QUOTE, dtype=np.uint8) & 1) == 0
    opens = ((data == _OPEN_LIST) | (data == _OPEN_OBJECT)) & outside
    containers = int(np.count_nonzero(opens))
    return int(np.count_nonzero((data == _COMMA) & outside)) + containers + 1, containers


def check_values(raw: bytes) -> None:
    """PayloadTooLarge when the JSON body `raw` holds more than MAX_VALUES values or more than
    MAX_CONTAINERS lists and objects."""
    containers = raw.count(b"[") + raw.count(b"{")
    if containers < MAX_CONTAINERS and raw.count(b",") + containers < MAX_VALUES:
        return  # even counting the strings' commas and brackets it is within the bounds
    values, containers = count_values(raw)
    if values > MAX_VALUES or containers > MAX_CONTAINERS:
        raise PayloadTooLarge(f"the body holds {values} JSON values in {containers} lists and objects; at most "
                              f"{MAX_VALUES} values and {MAX_CONTAINERS} lists and objects per request: split the "
                              "items over several requests")
