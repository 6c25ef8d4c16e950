"""Evicted models kept warm in host memory, so swapping one back in is a memory copy
(pinned host to GPU on CUDA; nothing at all on the CPU) instead of reading, converting
and loading its checkpoint again. Least recently evicted goes first past the budget.

On CUDA the pool's budget is GPU memory and this cache uses host RAM. On the CPU both are
RAM: the pool's budget bounds the models that run, this cache the models kept warm.
"""

from __future__ import annotations

from collections import OrderedDict

from .runner import ModelRunner


class HostCache:
    def __init__(self, budget_bytes: int):
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, ModelRunner] = OrderedDict()

    @property
    def used_bytes(self) -> int:
        return sum(r.param_bytes for r in self._entries.values())

    def __contains__(self, model_id: str) -> bool:
        return model_id in self._entries

    def fits(self, runner: ModelRunner) -> bool:
        """Whether an evicted runner can be kept (older entries make room for it)."""
        return 0 < runner.param_bytes <= self.budget_bytes

    def put(self, model_id: str, runner: ModelRunner) -> None:
        """Keep an evicted runner whose weights are already offloaded (`runner.offload()`, done by
        the pool off the event loop); the least recently evicted entries go to make room."""
        while self._entries and self.used_bytes + runner.param_bytes > self.budget_bytes:
            _, oldest = self._entries.popitem(last=False)
            oldest.release()
        self._entries[model_id] = runner

    def take(self, model_id: str) -> ModelRunner | None:
        return self._entries.pop(model_id, None)

    def ids(self) -> list[str]:
        return list(self._entries)

    def drop(self, model_id: str) -> None:
        """Forget a kept runner (its card was replaced or removed: its weights are stale)."""
        runner = self._entries.pop(model_id, None)
        if runner is not None:
            runner.release()
