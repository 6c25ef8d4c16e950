"""The garbage collector in a serving process: long-lived objects kept out of full collections.

A full (generation 2) collection walks every object the collector tracks, on whichever thread
triggers it, holding the GIL throughout. With torch, transformers and one model loaded that is
about 460,000 objects and 260-330 ms on the CPU box, during which the event loop answers nothing.
Under 32 clients of one-text requests one came every 7 s or so, and p99 latency was 300 ms against
a p50 of 40 ms (issue 27's "heavy tail"; measured with gc.callbacks, 2026-12-03). Nearly all of
those objects are modules, classes, functions and model structures that live as long as the
process. `gc.freeze()` moves every object tracked now into a permanent generation that
collections skip; what is made later (requests, batches) is collected as before.

A server freezes once it is built (the imports: about 190,000 objects) and after each model's
first load in the process (transformers imports a model's and tokenizer's modules lazily: the
first load adds about 270,000 objects). Reloads of an evicted model are not frozen again, so what
a freeze keeps for good is bounded by the catalog, and an evicted model's weights are freed
explicitly (the pool drops their storage), never left to the collector. Embedded mode (`Engine`
in a program's own process) leaves the program's collector alone.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_first_loads: set[str] = set()


def freeze_long_lived() -> int:
    """Collect what is garbage now, then freeze the rest; returns the objects frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def after_load(model_id: str) -> None:
    """A model has loaded: freeze after its first load in this process (without a collection:
    it runs while other models serve, and the loader's garbage has mostly gone young)."""
    with _lock:
        if model_id in _first_loads:
            return
        _first_loads.add(model_id)
    gc.freeze()
