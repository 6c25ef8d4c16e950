"""The SIE a Ray actor talks to: its own in-process Engine, or a server / cluster over HTTP.

Both are reached through `sie_client.SIEClient` (embedded mode for the Engine), so the three
calls, their chunking and result types are the client's, whichever side answers.

- In-process (`url=None`): each actor owns an Engine and loads the model in its constructor,
  once; the device is the actor's (`device="auto"` takes the GPU Ray gives an actor started
  with `num_gpus=1`: Ray sets its CUDA_VISIBLE_DEVICES to that one GPU).
- HTTP (`url="http://..."`): retries of 429 / 503 answers and of requests that never reached
  the server are the client's (`max_retries`, `backoff_s`, ...); an actor that dies is
  restarted and its batch retried by Ray (Ray Data starts map actors with `max_restarts=-1`
  and `max_task_retries=-1` unless `map_batches(..., max_restarts=0)` says otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sie_client import EMBEDDED, SIEClient

# Items per request. In-process there is no wire to bound: the Engine merges requests into its
# own token-budget batches, so a whole Ray batch goes as one request. Over HTTP the client's
# default keeps bodies small and sends `max_concurrency` of them at a time.
EMBEDDED_BATCH = 4096


def open_client(model: str, url: str | None, *, device: str = "auto", local_models: Mapping[str, str] | None = None,
                model_dirs: Sequence[str] = (), client_options: Mapping[str, Any] | None = None) -> SIEClient:
    """A client for `model`: over HTTP when `url` is given, else on an Engine of this process with
    the model loaded (so a missing or broken model fails the actor's start, not its first batch)."""
    options = dict(client_options or {})
    options.setdefault("progress", False)  # Ray Data reports progress; a tqdm bar per actor would garble it
    if url is not None and url != EMBEDDED:
        if local_models or model_dirs:
            raise ValueError("local_models and model_dirs configure an in-process Engine: leave them out with a url")
        return SIEClient(url, **options)
    from sie_client.embedded import shared_engine

    engine = shared_engine(device, local_models, tuple(model_dirs))
    engine.load_sync(model)
    options.setdefault("batch_size", EMBEDDED_BATCH)
    return SIEClient(EMBEDDED, engine=engine, **options)
