"""sie_client against servers that do not answer: a hung server (accepts, never answers), one
that trickles its answer, and a port whose connects hang. Each timeout surfaces within its
bound, names itself (never "cannot reach" for a read timeout), and a POST whose answer timed
out is not sent again unless the caller asks; connects and GETs are retried, within bounds.
Also what `timeout=` and the retry arguments mean."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from integration_recall import MODEL
from sie_client import (
    AsyncSIEClient,
    RetryPolicy,
    SIEClient,
    SIEConnectionError,
    SIEError,
    SIETimeoutError,
    Timeouts,
)
from stalled_servers import hung_server, trickling_server, unaccepting_server


def timed(call):
    start = time.monotonic()
    with pytest.raises(SIEError) as raised:
        call()
    return raised.value, time.monotonic() - start


def test_a_hung_server_surfaces_after_the_read_timeout_once():
    """A POST that went out whole is not retried: the server saw it and may be running it."""
    with hung_server() as server:
        client = SIEClient(server.url, timeout=Timeouts(read=0.5))
        error, elapsed = timed(lambda: client.encode(MODEL, ["x"]))
    assert isinstance(error, SIETimeoutError)
    assert (error.kind, error.timeout_s, error.may_have_run) == ("read", 0.5, True)
    assert 0.5 <= elapsed < 2.0 and len(server.requests) == 1
    assert str(error) == f"read timeout after 0.5 s waiting for SIE's answer to POST {server.url}/v1/encode/{MODEL}"
    assert "cannot reach" not in str(error) and error.code == "timeout"


def test_read_timeouts_of_posts_are_retried_when_asked():
    with hung_server() as server:
        client = SIEClient(server.url, timeout=Timeouts(read=0.3), max_retries=2, backoff_s=0.01,
                           retry_read_timeouts=True)
        error, elapsed = timed(lambda: client.encode(MODEL, ["x"]))
    assert isinstance(error, SIETimeoutError) and error.kind == "read"
    assert len(server.requests) == 3 and 0.9 <= elapsed < 3.0


def test_gets_are_idempotent_and_retried_within_max_retries():
    with hung_server() as server:
        client = SIEClient(server.url, timeout=Timeouts(read=0.3), max_retries=1, backoff_s=0.01)
        error, _ = timed(client.models)
    assert isinstance(error, SIETimeoutError) and error.kind == "read" and len(server.requests) == 2


async def test_the_async_client_times_out_alike():
    with hung_server() as server:
        async with AsyncSIEClient(server.url, timeout=Timeouts(read=0.5)) as client:
            start = time.monotonic()
            with pytest.raises(SIETimeoutError) as raised:
                await client.encode(MODEL, ["x"])
            elapsed = time.monotonic() - start
    assert raised.value.kind == "read" and 0.5 <= elapsed < 2.0 and len(server.requests) == 1
    assert str(raised.value).startswith("read timeout after 0.5 s waiting for SIE's answer to POST")


def test_the_total_deadline_ends_an_answer_that_never_ends():
    """A byte every 0.1 s never trips a 0.5 s read timeout; the 1.5 s total ends the request."""
    with trickling_server() as server:
        client = SIEClient(server.url, timeout=Timeouts(read=0.5, total=1.5), retry_read_timeouts=True)
        error, elapsed = timed(lambda: client.encode(MODEL, ["x"]))
    assert isinstance(error, SIETimeoutError) and (error.kind, error.timeout_s) == ("total", 1.5)
    assert 1.5 <= elapsed < 3.0 and len(server.requests) == 1  # a spent deadline is never retried
    assert "total timeout after 1.5 s" in str(error)


async def test_the_async_total_deadline_too():
    with trickling_server() as server:
        async with AsyncSIEClient(server.url, timeout=Timeouts(read=0.5, total=1.0)) as client:
            start = time.monotonic()
            with pytest.raises(SIETimeoutError) as raised:
                await client.encode(MODEL, ["x"])
    assert raised.value.kind == "total" and 1.0 <= time.monotonic() - start < 2.5


def test_the_total_deadline_bounds_retries_of_a_hung_server():
    """Read timeouts retried (as asked) stop at the total: the last attempt is cut to what is left."""
    with hung_server() as server:
        client = SIEClient(server.url, timeout=Timeouts(read=0.4, total=1.0), max_retries=50, backoff_s=0.01,
                           retry_read_timeouts=True)
        error, elapsed = timed(lambda: client.encode(MODEL, ["x"]))
    assert isinstance(error, SIETimeoutError) and error.kind == "total"
    assert 1.0 <= elapsed < 2.0 and 2 <= len(server.requests) <= 4


def test_a_connect_that_hangs_is_a_connect_timeout_and_retried():
    with unaccepting_server() as url:
        client = SIEClient(url, timeout=Timeouts(connect=0.3), max_retries=2, backoff_s=0.01)
        error, elapsed = timed(lambda: client.encode(MODEL, ["x"]))
    assert isinstance(error, SIETimeoutError) and (error.kind, error.may_have_run) == ("connect", False)
    assert 0.9 <= elapsed < 3.0  # three connects of 0.3 s
    assert str(error).startswith("connect timeout after 0.3 s connecting to SIE for POST")


def test_a_refused_connection_says_cannot_reach_and_is_retried():
    start = time.monotonic()
    client = SIEClient("http://127.0.0.1:9", max_retries=3, backoff_s=0.05)
    with pytest.raises(SIEConnectionError, match="cannot reach SIE at http://127.0.0.1:9") as raised:
        client.encode(MODEL, ["x"])
    assert not isinstance(raised.value, SIETimeoutError) and raised.value.kind == "connect"
    assert time.monotonic() - start >= 0.05 + 0.1 + 0.2  # three back-offs: it was retried


def test_what_timeout_means():
    default = SIEClient("http://127.0.0.1:9").timeout
    assert (default.connect, default.read, default.write, default.pool, default.total) == (5, 120, 60, 60, 300)
    seconds = SIEClient("http://127.0.0.1:9", timeout=30).timeout
    assert (seconds.connect, seconds.read, seconds.write, seconds.total) == (5, 30, 30, 300)
    assert SIEClient("http://127.0.0.1:9", timeout=2).timeout.connect == 2
    assert SIEClient("http://127.0.0.1:9", timeout=600).timeout.total == 600
    given = SIEClient("http://127.0.0.1:9", timeout=httpx.Timeout(3.0, read=9.0)).timeout
    assert (given.connect, given.read, given.total) == (3, 9, 300)
    unbounded = SIEClient("http://127.0.0.1:9", timeout=None).timeout
    assert (unbounded.read, unbounded.total) == (None, None)
    with pytest.raises(ValueError, match="read"):
        Timeouts(read=0)
    with pytest.raises(TypeError, match="timeout="):
        SIEClient("http://127.0.0.1:9", timeout="30")


def test_retry_arguments_change_the_policy():
    client = SIEClient("http://127.0.0.1:9", retry=RetryPolicy(max_total_wait_s=5), max_retries=2, backoff_s=0.5,
                       retry_read_timeouts=True)
    assert client.retry == RetryPolicy(max_attempts=3, max_total_wait_s=5, backoff_s=0.5, retry_read_timeouts=True)
    assert SIEClient("http://127.0.0.1:9", max_retries=0).retry.max_attempts == 1
    with pytest.raises(ValueError):
        SIEClient("http://127.0.0.1:9", max_retries=-1)


def test_which_errors_are_retried():
    policy = RetryPolicy()
    sent = SIETimeoutError("read", 1.0, "http://h", may_have_run=True)
    unsent = SIETimeoutError("connect", 1.0, "http://h", may_have_run=False)
    assert not policy.should_retry(sent, "POST") and policy.should_retry(sent, "GET")
    assert RetryPolicy(retry_read_timeouts=True).should_retry(sent, "POST")
    assert policy.should_retry(unsent, "POST")
    assert not policy.should_retry(SIETimeoutError("total", 1.0, "http://h", may_have_run=True), "GET")
    assert policy.should_retry(SIEError(503, "draining", "bye", retry_after=1.0), "POST")
    assert not policy.should_retry(SIEError(503, "model_load_failed", "no weights", retryable=False), "POST")
    assert policy.delay(sent, 1, 0.0) is None and policy.delay(sent, 1, 0.0, method="GET") == 0.25


def test_successive_event_loops_time_out_alike():
    """The timeouts are the client's, not the loop's: a second `asyncio.run` sees the same bound."""
    with hung_server() as server:
        client = AsyncSIEClient(server.url, timeout=Timeouts(read=0.3))

        async def once() -> str:
            with pytest.raises(SIETimeoutError) as raised:
                await client.encode(MODEL, ["x"])
            return raised.value.kind

        assert [asyncio.run(once()) for _ in range(2)] == ["read", "read"]
        assert len(server.requests) == 2


async def test_adapters_clients_carry_the_retry_and_timeout_settings():
    """`Clients` (what the framework adapters hold) makes both clients with the same settings, and a
    sync client made for a given async one copies its policy."""
    from sie_client import Clients

    with hung_server() as server:
        clients = Clients(url=server.url, timeout=Timeouts(read=0.3), max_retries=0)
        assert clients.sync.retry.max_attempts == 1 and clients.sync.timeout.read == 0.3
        with pytest.raises(SIETimeoutError):
            await clients.call("encode", MODEL, ["x"])
        assert len(server.requests) == 1
        given = AsyncSIEClient(server.url, max_retries=2, retry_read_timeouts=True, timeout=Timeouts(read=0.3))
        made = Clients(async_client=given).sync
        assert (made.retry, made.timeout, made.url) == (given.retry, given.timeout, given.url)
