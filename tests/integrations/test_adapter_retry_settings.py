"""The database adapters pass the client's retry policy through (`retry=`, a RetryPolicy: the
client's own keyword; the framework adapters take `max_retries` as their frameworks name it).
With one attempt, an unreachable server fails at once instead of after the client's back-off;
with the default policy, a reachable server answers as before."""

from __future__ import annotations

import time

import pytest

from integration_recall import MODEL
from sie_client import RetryPolicy, SIEConnectionError
from sie_client.timeouts import resolve_timeouts

ONE_TRY = RetryPolicy(max_attempts=1)


def adapters():
    pytest.importorskip("qdrant_client")
    pytest.importorskip("weaviate")
    from sie_qdrant import AsyncSIEQdrant, SIEQdrant
    from sie_weaviate import AsyncSIEWeaviate, SIEWeaviate

    return SIEQdrant, AsyncSIEQdrant, SIEWeaviate, AsyncSIEWeaviate


async def test_retry_policy_reaches_the_client():
    sync_qdrant, async_qdrant, sync_weaviate, async_weaviate = adapters()
    for cls in (sync_qdrant, async_qdrant, sync_weaviate, async_weaviate):
        adapter = cls(dense_model=MODEL, url="http://127.0.0.1:9", timeout=3.0, retry=ONE_TRY)
        assert adapter.client.retry == ONE_TRY and adapter.client.timeout == resolve_timeouts(3.0)
    start = time.monotonic()
    with pytest.raises(SIEConnectionError):
        sync_qdrant(dense_model=MODEL, url="http://127.0.0.1:9", retry=ONE_TRY).embed_documents(["x"])
    with pytest.raises(SIEConnectionError):
        await async_qdrant(dense_model=MODEL, url="http://127.0.0.1:9", retry=ONE_TRY).embed_documents(["x"])
    assert time.monotonic() - start < 3.0


def test_default_policy_still_answers(sie_url):
    sync_qdrant, _, _, _ = adapters()
    rows = sync_qdrant(dense_model=MODEL, url=sie_url).embed_documents(["udisks mounts disks"])
    assert len(rows[0]["dense"]) == 384
