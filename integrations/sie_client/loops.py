"""One object per running event loop, made on first use in that loop.

An `httpx.AsyncClient` (its connection pool, its sockets) belongs to the loop it first
ran on; used from another loop it fails ("Event loop is closed", or a future attached
to a different loop). Callers such as LlamaIndex run `asyncio.run(...)` several times
in one program, each a new loop, so the async transport keeps one client per loop.
Objects of loops that are closed (or gone) are dropped without being touched: closing
them would need their dead loop.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def _reference(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.AbstractEventLoop | None]:
    try:
        return weakref.ref(loop)
    except TypeError:  # a loop type without weak references: held until it is closed
        return lambda: loop


class PerLoop(Generic[T]):
    """`get()` inside a coroutine: this loop's object, made by `make()` the first time."""

    def __init__(self, make: Callable[[], T]):
        self._make = make
        # id(loop) -> (a reference to the loop, its object); the reference tells a reused id apart
        self._items: dict[int, tuple[Callable[[], asyncio.AbstractEventLoop | None], T]] = {}
        self._lock = threading.Lock()  # loops in several threads may share one client

    def _live(self) -> dict[int, tuple[asyncio.AbstractEventLoop, T]]:
        """The entries whose loop is alive and open; the others are forgotten (under the lock)."""
        live: dict[int, tuple[asyncio.AbstractEventLoop, T]] = {}
        for key, (ref, item) in list(self._items.items()):
            loop = ref()
            if loop is None or loop.is_closed() or id(loop) != key:
                del self._items[key]
            else:
                live[key] = (loop, item)
        return live

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._live().get(id(loop))
            if entry is not None and entry[0] is loop:
                return entry[1]
            item = self._make()
            self._items[id(loop)] = (_reference(loop), item)
            return item

    def take_all(self) -> tuple[T | None, list[tuple[asyncio.AbstractEventLoop, T]]]:
        """Empty the cache: (the running loop's object or None, [(loop, object)] of the other
        live loops); objects of dead loops are dropped."""
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        with self._lock:
            live = self._live()
            self._items.clear()
        mine = live.pop(id(current), None) if current is not None else None
        return (mine[1] if mine else None), list(live.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._live())
