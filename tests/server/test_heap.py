"""server/heap.py: a serving process's long-lived objects frozen out of full collections."""

from __future__ import annotations

import json
import subprocess
import sys

# in a process of its own: a freeze is for the rest of a process's life
_PROBE = """
import gc, json, weakref
from sie_server import heap

class Cycle:
    pass

garbage = Cycle(); garbage.me = garbage; gone = weakref.ref(garbage); del garbage
out = {"frozen_at_start": heap.freeze_long_lived(), "cycle_collected_first": gone() is None}
before = gc.get_freeze_count()
loaded = [[] for _ in range(100)]  # what a model's first load leaves
heap.after_load("model-a")
first = gc.get_freeze_count()
reloaded = [[] for _ in range(100)]
heap.after_load("model-a")  # a reload after an eviction: not frozen again
out.update(first_load=first - before, reload=gc.get_freeze_count() - first)
heap.after_load("model-b")
out["other_model"] = gc.get_freeze_count() - first
print(json.dumps(out))
"""


def test_the_startup_heap_and_each_models_first_load_are_frozen_once():
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True)
    out = json.loads(done.stdout)
    assert out["frozen_at_start"] > 1000  # the imports
    assert out["cycle_collected_first"]  # garbage is collected, not kept for good
    assert out["first_load"] >= 100
    assert out["reload"] == 0
    assert out["other_model"] >= 100
