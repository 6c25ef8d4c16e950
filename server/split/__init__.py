"""The split server (`sie-server serve --frontends N`, issue #27): N HTTP frontend processes
share the port (SO_REUSEPORT) and one engine-core process owns the engine (pool, admission,
scheduler, inference); they talk over ZMQ with msgspec-encoded messages.

    supervisor (supervisor.py: starts, watches and replaces the others; no torch)
      |- frontend x N (frontend.py: the same aiohttp app as one process, `create_app`, over an
      |                EngineClient (client.py) in place of the Engine; no torch)
      '- engine core  (core.py: the Engine, answering the frontends' calls on a ROUTER socket)

What crosses (protocol.py): per work request the task's decoded, validated request struct
(msgpack; the engine decodes it into the same struct type), the deadline and a call id; back,
the engine's result object (pickled: dataclasses holding numpy arrays, protocol 5) or the
engine's error (class name and attributes, rebuilt as the same SIEError). Texts cross, not
token ids: tokenising stays in the engine this round (its tokenizer pool owns the card's
tokenizer, truncation and prompts). Admission stays in the engine; its current queue wait is
published to the frontends in shared memory (wait_board.py), so a frontend answers 429 at once
before reading a body, as one process does.
"""
