"""Queue mode (issue #32.2): the router publishes work to a NATS JetStream work-queue stream per
pool, engines pull it when they have room, answer on the router's inbox and ack afterwards.

- layout.py: the names and settings both sides derive the streams, consumers and bucket from;
- wire.py: a request as a message and an answer as a reply (headers, parts over max_payload);
- dispatch.py: the router's side (publish, await the reply, drop duplicates);
- consumer.py: the engine's side (pull within admission, answer, ack, dead-letter);
- configs.py: runtime model cards through a KV bucket every engine watches.

nats-py is imported here only: the `queue` extra, absent from a direct-mode install.
"""
