"""API keys: `Authorization: Bearer <key>`, compared in constant time.

Keys come from `--api-key`, the `SIE_API_KEYS` environment variable
(comma-separated) and an optional key file (one key per line or comma-separated, `#` comments:
a Kubernetes Secret holding the same comma-separated value as SIE_API_KEYS works as a file).
The file is re-read whenever its mtime or size changes, so keys rotate without
a restart; a file that vanishes or cannot be read keeps the last good keys
(and logs why) rather than locking everyone out or letting everyone in.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

ENV_VAR = "SIE_API_KEYS"


def keys_from_env(environ=os.environ) -> tuple[str, ...]:
    return tuple(k.strip() for k in environ.get(ENV_VAR, "").split(",") if k.strip())


def read_key_file(path: Path) -> tuple[str, ...]:
    keys: list[str] = []
    for line in Path(path).read_text().splitlines():
        keys.extend(k.strip() for k in line.split("#", 1)[0].split(",") if k.strip())
    return tuple(keys)


class ApiKeys:
    def __init__(self, static: tuple[str, ...] = (), key_file: Path | None = None):
        self._static = tuple(k.encode() for k in static)
        self._file = Path(key_file) if key_file is not None else None
        self._from_file: tuple[bytes, ...] = ()
        self._file_stamp: tuple[float, int] | None = None
        if self._file is not None:  # a bad key file at start-up is an error the operator sees at once
            self._reload(self._file, self._stat(self._file))

    @property
    def enabled(self) -> bool:
        return bool(self._static) or self._file is not None

    @staticmethod
    def _stat(path: Path) -> tuple[float, int]:
        st = path.stat()
        return st.st_mtime_ns, st.st_size

    def _reload(self, path: Path, stamp: tuple[float, int]) -> None:
        self._from_file = tuple(k.encode() for k in read_key_file(path))
        self._file_stamp = stamp
        log.info("read %d API key(s) from %s", len(self._from_file), path)

    def refresh(self) -> None:
        """Re-read the key file if it changed (blocking: call on a worker thread)."""
        if self._file is None:
            return
        try:
            stamp = self._stat(self._file)
            if stamp != self._file_stamp:
                self._reload(self._file, stamp)
        except OSError as exc:
            log.warning("cannot read API key file %s (%s); keeping the last %d key(s)", self._file, exc,
                        len(self._from_file))

    async def watch(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.refresh)

    def first_key(self) -> str | None:
        """A key this set accepts (the router calls the workers' admin API with it), or None."""
        keys = self._static + self._from_file
        return keys[0].decode() if keys else None

    def check(self, authorization: str | None) -> bool:
        """True when the header carries one of the keys. Every key is compared, in
        constant time, so timing reveals neither the key nor which one matched."""
        if not authorization:
            return False
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return False
        # aiohttp keeps undecodable header bytes as surrogates: such a token matches no key.
        token_bytes = token.strip().encode("utf-8", "surrogateescape")
        matched = False
        for key in self._static + self._from_file:
            matched |= hmac.compare_digest(token_bytes, key)
        return matched
