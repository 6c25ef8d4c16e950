"""Request fields of the routes that are not tasks (tasks declare theirs in
`sie_contract`'s registry): handlers reject anything else (a typo must not be
silently ignored) and the OpenAPI document lists exactly these."""

from __future__ import annotations

EMBEDDINGS_FIELDS = ("model", "input", "encoding_format", "dimensions", "user")
