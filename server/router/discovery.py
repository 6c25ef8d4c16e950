"""Where the workers are: a static list, or the records behind Kubernetes headless services."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

from .config import PoolService, RouterConfig

log = logging.getLogger("sie_server.router")


def _host_for_url(address: str) -> str:
    try:
        if ipaddress.ip_address(address).version == 6:
            return f"[{address}]"
    except ValueError:
        pass
    return address


async def resolve_service(service: PoolService) -> set[str]:
    """Worker base URLs behind one headless service (empty when it has no endpoints).

    A headless service with no ready (or, with publishNotReadyAddresses, no) pods has no
    records at all: NXDOMAIN there means "scaled to zero", not an error.
    """
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(service.host, service.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        log.debug("no addresses for %s: %s", service.host, exc)
        return set()
    return {
        f"{service.scheme}://{_host_for_url(str(info[4][0]))}:{service.port}" for info in infos
    }


async def discover(config: RouterConfig) -> dict[str, str | None]:
    """Every worker URL -> its discovery pool label (None: take the worker's own report)."""
    found: dict[str, str | None] = {w.url.rstrip("/"): w.pool for w in config.workers}
    results = await asyncio.gather(*(resolve_service(s) for s in config.services))
    for service, urls in zip(config.services, results):
        for url in urls:
            found[url] = service.pool
    return found
