"""Request ids and answer ids: uuid4's form and uniqueness, and a forked child's ids its own."""

from __future__ import annotations

import os
import re
import uuid

from sie_server.request_ids import fresh_hex, fresh_uuid


def test_fresh_uuid_is_a_canonical_version_4_uuid():
    for _ in range(1000):
        text = fresh_uuid()
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, text)


def test_fresh_hex_has_uuid4_hex_form_and_ids_do_not_repeat():
    ids = [fresh_hex() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in ids)
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_repeat_its_parents_ids():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.close(read)
        os.write(write, fresh_hex().encode())
        os._exit(0)
    os.close(write)
    parents_next = fresh_hex()
    with os.fdopen(read, "rb") as pipe:
        childs_next = pipe.read().decode()
    os.waitpid(pid, 0)
    assert len(childs_next) == 32 and childs_next != parents_next
