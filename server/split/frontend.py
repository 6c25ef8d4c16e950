"""A frontend process of a split server: HTTP, body decoding and validation (the contract),
answer encoding, for the one app `create_app` builds, over an EngineClient. No torch.

    python -m sie_server.split.frontend SERVE-OPTIONS...   (started by the supervisor)

It binds the server's port with SO_REUSEPORT beside its siblings (the kernel spreads the
connections over them), tells the supervisor it listens through the pipe named in
SIE_SPLIT_READY_FD, and drains on SIGTERM exactly as a one-process server does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, cast

from ..metrics import ServerMetrics
from ..settings import ServerSettings
from .client import EngineClient
from .paths import ENGINE_LOST, INDEX, PORT, READY_FD, SplitPaths, die_with_parent

if TYPE_CHECKING:
    from sie_engine import Engine

log = logging.getLogger(__name__)


async def run_frontend(args: Any, paths: SplitPaths) -> int:
    from sie_engine.validation import Limits

    from ..options import SERVE, targets
    from ..serve import serve

    values = vars(args)
    settings = ServerSettings(**targets(SERVE, values, "settings"))
    settings = dataclasses.replace(settings, port=int(os.environ[PORT]))
    limits = Limits(**targets(SERVE, values, "limits"))
    client = EngineClient(limits, paths, identity=f"frontend-{os.getpid()}".encode())
    await client.start()
    asyncio.get_running_loop().add_signal_handler(ENGINE_LOST, client.engine_lost)

    def listening(host: str, port: int) -> None:
        log.info("frontend %s (pid %d) listening on %s:%d", os.environ.get(INDEX, "?"), os.getpid(), host, port)
        ready = int(os.environ[READY_FD])
        os.write(ready, b"1")
        os.close(ready)

    try:
        # the client answers the Engine methods the app calls (client.py lists them)
        return await serve(cast("Engine", client), settings, ServerMetrics(), announce=listening, reuse_port=True,
                           card_admin=client.card_admin)
    finally:
        await client.aclose()


def main(argv: list[str]) -> int:
    from ..cli import parse

    args = parse(["serve", *argv])
    die_with_parent()
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s %(levelname)s frontend-{os.environ.get(INDEX, '?')} %(name)s: %(message)s")
    code = asyncio.run(run_frontend(args, SplitPaths.from_env()))
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
