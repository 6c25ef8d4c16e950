"""Queue mode's reply framing (server/queue/wire.py): an answer split into parts under a
max_payload, put back together byte for byte; a redelivered request's second answer starting
over; headers of the engine's answer kept, its Server and framing headers dropped."""

from __future__ import annotations

import os

from sie_server.queue import wire


def _reassemble(replies):
    assembly = wire.Assembly()
    done = [assembly.add(head, data) for head, data in replies]
    assert all(d is None for d in done[:-1])
    return done[-1]


def test_an_answer_over_max_payload_comes_back_whole():
    body = os.urandom(300_000)
    replies = wire.answer_messages(200, {"Content-Type": "application/msgpack", "Server": "sie",
                                         "Content-Length": "300000", "X-SIE-Worker": "w:1"}, body, 64 * 1024)
    assert len(replies) == 7  # 300,000 bytes in parts of 64 KiB less the header room
    assert all(len(data) <= 64 * 1024 - wire.HEADER_ROOM for _, data in replies)
    answer = _reassemble(replies)
    assert answer.status == 200 and answer.body == body
    assert answer.headers == {"Content-Type": "application/msgpack", "X-SIE-Worker": "w:1"}


def test_an_empty_answer_is_one_reply():
    (reply,) = wire.answer_messages(204, {}, b"", 1024 * 1024)
    assert _reassemble([reply]).body == b""


def test_a_second_answer_starts_over_and_a_stray_part_is_ignored():
    first = wire.answer_messages(503, {"Content-Type": "application/json"}, b"x" * 5000, 1024 + wire.HEADER_ROOM)
    second = wire.answer_messages(200, {"Content-Type": "application/json"}, b"y" * 3000, 1024 + wire.HEADER_ROOM)
    assembly = wire.Assembly()
    assert assembly.add(*first[0]) is None and assembly.add(*first[1]) is None  # the first engine died here
    answer = None
    for head, data in second:
        answer = assembly.add(head, data)
    assert answer is not None and answer.status == 200 and answer.body == b"y" * 3000
    stray = wire.Assembly()
    assert stray.add(*first[2]) is None  # a later part whose first was never seen
