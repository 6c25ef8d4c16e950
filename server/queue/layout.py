"""The names and settings of queue mode, declared once for the router and the engines.

Per pool NAME:
- stream `SIE_WORK_NAME`, subject `sie.work.NAME`, WorkQueue retention: a message is kept until an
  engine acks it, then removed; per-message TTLs (`Nats-TTL`) drop work nobody started in time,
  so the stream's lag (what KEDA's `nats-jetstream` trigger scales on) counts live work only;
- durable pull consumer `engines` on it, shared by every engine of the pool: whichever engine
  pulls first gets a message, AckWait later an unacked one goes to the next puller. JetStream's own
  `max_deliver` is unlimited: the engines count deliveries themselves (`sie_max_deliver` in the
  consumer's metadata) and move a message delivered too often to the dead-letter stream with an
  answer to the client; a message the server stopped delivering would sit in the stream, unanswered
  and counted as lag, forever;
- stream `SIE_DEAD_NAME`, subject `sie.dead.NAME`: dead letters, bounded by count and age (the
  oldest go first), for an operator to read.
The runtime model cards live in the KV bucket `sie_configs` (configs.py), one for all pools.

The router owns these: it creates them and updates their settings at start (its --queue-* options);
engines bind to what it made and read the delivery limit and AckWait from the consumer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STREAM_PREFIX = "SIE_WORK_"
SUBJECT_PREFIX = "sie.work."
DEAD_STREAM_PREFIX = "SIE_DEAD_"
DEAD_SUBJECT_PREFIX = "sie.dead."
CONSUMER = "engines"
CONFIG_BUCKET = "sie_configs"
# the consumer metadata key that carries the delivery limit the engines enforce
MAX_DELIVER_KEY = "sie_max_deliver"
# a pool name is one subject token and part of a stream name: no dots, wildcards or spaces
_POOL = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check_pool(pool: str) -> str:
    if not _POOL.match(pool):
        raise ValueError(f"pool {pool!r} cannot name a queue: use 1-64 letters, digits, '-' or '_'")
    return pool


def stream(pool: str) -> str:
    return STREAM_PREFIX + check_pool(pool)


def subject(pool: str) -> str:
    return SUBJECT_PREFIX + check_pool(pool)


def dead_stream(pool: str) -> str:
    return DEAD_STREAM_PREFIX + check_pool(pool)


def dead_subject(pool: str) -> str:
    return DEAD_SUBJECT_PREFIX + check_pool(pool)


@dataclass(frozen=True)
class QueueLayout:
    """The router's --queue-* settings of the streams and the consumer."""

    # An engine heartbeats (`in_progress`) a message it works on every third of this, so a long
    # request is never redelivered while its engine lives; a dead engine's messages go to another
    # engine this long after it stopped heartbeating.
    ack_wait_s: float = 10.0
    # Deliveries of one message before it is dead-lettered (each engine that took it died or
    # handed it back without answering).
    max_deliver: int = 3
    dead_letter_max_msgs: int = 10_000
    dead_letter_max_age_s: float = 7 * 24 * 3600.0
    # JetStream's duplicate window: a publish retried with the same Nats-Msg-Id within it is stored once.
    duplicate_window_s: float = 120.0


async def ensure(js, pools: list[str], layout: QueueLayout) -> None:
    """Create or update every pool's streams and consumer, and the config bucket."""
    from nats.js import api
    from nats.js.errors import BadRequestError, NotFoundError

    for pool in pools:
        work = api.StreamConfig(
            name=stream(pool), subjects=[subject(pool)], retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE, allow_msg_ttl=True, duplicate_window=layout.duplicate_window_s)
        dead = api.StreamConfig(
            name=dead_stream(pool), subjects=[dead_subject(pool)], retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE, max_msgs=layout.dead_letter_max_msgs,
            max_age=layout.dead_letter_max_age_s, discard=api.DiscardPolicy.OLD)
        for config in (work, dead):
            try:
                await js.add_stream(config)
            except BadRequestError:  # it exists with other settings: the router's are the ones
                await js.update_stream(config)
        consumer = api.ConsumerConfig(
            durable_name=CONSUMER, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=layout.ack_wait_s,
            max_deliver=-1, max_ack_pending=-1, metadata={MAX_DELIVER_KEY: str(layout.max_deliver)})
        await js.add_consumer(stream(pool), consumer)  # creates, or updates the durable's settings
    try:
        await js.key_value(CONFIG_BUCKET)
    except NotFoundError:
        await js.create_key_value(bucket=CONFIG_BUCKET, history=1, storage=api.StorageType.FILE)
