"""The wait board read by frontends while the engine core writes it (two processes, no lock).

Before the seqlock about 1% of reads saw a half-written board (a bound of 0 s: a spurious 429)."""

from __future__ import annotations

import multiprocessing
import time

from sie_server.split.wait_board import WaitBoard


def _publish_forever(path, stop) -> None:
    board = WaitBoard(path)
    i = 0
    while not stop.is_set():
        board.publish(0.25 * (i % 8), 30.0)
        i += 1


def test_a_reader_never_sees_a_half_written_board(tmp_path):
    path = tmp_path / "wait_board"
    WaitBoard(path, create=True).publish(0.0, 30.0)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    reader = WaitBoard(path)
    assert reader.read() == (0.0, 30.0)  # read whole before the writer starts
    writer = context.Process(target=_publish_forever, args=(path, stop), daemon=True)
    writer.start()
    torn, reads, deadline = [], 0, time.monotonic() + 10.0
    try:
        while time.monotonic() < deadline and reads < 300_000:
            wait, bound = reader.read()
            reads += 1
            if bound != 30.0 or wait not in {0.25 * k for k in range(8)}:
                torn.append((wait, bound))
    finally:
        stop.set()
        writer.join(10)
    assert not torn, f"{len(torn)} of {reads} reads saw a board being written, e.g. {torn[:3]}"
