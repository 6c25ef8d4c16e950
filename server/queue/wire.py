"""A work request as a JetStream message, and its answer as replies on the router's inbox.

A request message carries the HTTP request whole: body as sent (JSON or msgpack, maybe
compressed), method and raw path, the headers that mean something to an engine, where to answer
(`SIE-Reply`: the JetStream reply subject is the ack's) and two times, in Unix seconds on the
router's clock (cluster clocks are NTP-synced; a skew of a second shifts these by as much):
`SIE-Start-By`, the end of the hold window (an engine that first sees the message later drops it:
the router has answered 503 already), and `SIE-Deadline`, the client's X-SIE-Timeout-Ms (an engine
drops the expired message; the router answers 504 itself at that moment, as direct mode does).
The API key stays at the router: an engine calls its own server with its own key.

Replies: an `SIE-Event: started` when an engine takes the message (the router's hold ends, and a
redelivery after an engine died sends another), then the answer: `SIE-Status`, the engine's answer
headers and body, split into `SIE-Part: i/n` messages when it is larger than the connection's
max_payload allows in one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

REPLY = "SIE-Reply"
METHOD = "SIE-Method"
PATH = "SIE-Path"
START_BY = "SIE-Start-By"
DEADLINE = "SIE-Deadline"
EVENT = "SIE-Event"
STATUS = "SIE-Status"
PART = "SIE-Part"
WORKER = "X-SIE-Worker"
# the answer's delivery: 2 or more when an engine that took it before died or handed it back
DELIVERIES = "X-SIE-Queue-Deliveries"
MSG_ID = "Nats-Msg-Id"
STARTED = "started"
ANSWER = "answer"
# Request headers an engine needs (as direct mode forwards them, less the API key).
FORWARDED = ("Content-Type", "Content-Encoding", "Accept", "Accept-Encoding", "X-Request-Id")
# Not copied from an engine's answer: hop-by-hop, recomputed by the router, or the engine's Server.
DROPPED = frozenset(h.lower() for h in ("Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length",
                                        "Date", "Server"))
# Room left in each part for the headers (NATS counts them into max_payload).
HEADER_ROOM = 16 * 2**10


def answer_messages(status: int, headers: Mapping[str, str], body: bytes,
                    max_payload: int) -> list[tuple[dict[str, str], bytes]]:
    """The replies that carry one answer: the headers on the first, the body in parts."""
    size = max(1024, max_payload - HEADER_ROOM)
    chunks = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
    first = {k: v for k, v in headers.items() if k.lower() not in DROPPED and not k.startswith("SIE-")}
    first.update({EVENT: ANSWER, STATUS: str(status)})
    replies = []
    for index, chunk in enumerate(chunks):
        head = dict(first) if index == 0 else {EVENT: ANSWER}
        head[PART] = f"{index + 1}/{len(chunks)}"
        replies.append((head, chunk))
    return replies


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Assembly:
    """The parts of one answer as they arrive (NATS keeps one publisher's order on a subject)."""

    headers: dict[str, str] = field(default_factory=dict)
    parts: list[bytes] = field(default_factory=list)
    expected: int = 0

    def add(self, headers: Mapping[str, str], data: bytes) -> Answer | None:
        """The whole answer once its last part is here, else None. A part 1 starts over (a
        redelivered request answered again by another engine)."""
        index, _, total = headers.get(PART, "1/1").partition("/")
        if index == "1":
            self.headers, self.parts, self.expected = dict(headers), [], int(total or 1)
        elif not self.expected:
            return None  # a stray later part of an answer whose start was not seen
        self.parts.append(data)
        if len(self.parts) < self.expected:
            return None
        head = self.headers
        status = int(head.get(STATUS, "502"))
        kept = {k: v for k, v in head.items() if not k.startswith("SIE-") and k != MSG_ID}
        return Answer(status, kept, b"".join(self.parts))
