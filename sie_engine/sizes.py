"""Sizes as people write them (`8GiB`, `512MB`, `1e9`): one table of units for the engine's
`parse_bytes` and the server's option parser, torch-free so the CLI reads sizes without loading it."""

from __future__ import annotations

UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 2**10, "M": 1e6, "MB": 1e6, "MIB": 2**20,
         "G": 1e9, "GB": 1e9, "GIB": 2**30, "T": 1e12, "TB": 1e12, "TIB": 2**40}


def parse_bytes(value: int | str) -> int:
    """`8GiB`, `512MB`, `1e9` or an int -> bytes."""
    if isinstance(value, int):
        return value
    text = str(value).strip().upper().replace(" ", "")
    number = text.rstrip("KMGTIB")
    unit = text[len(number):]
    if unit not in UNITS or not number:
        raise ValueError(f"cannot read {value!r} as a size (examples: 8GiB, 512MB)")
    return int(float(number) * UNITS[unit])
