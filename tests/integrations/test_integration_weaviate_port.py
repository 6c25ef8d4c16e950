"""SIE and Weaviate both default to port 8080: a Weaviate client pointed at SIE by
mistake gets an answer that says so (the client shows only the answer's message)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

weaviate = pytest.importorskip("weaviate")

from server_fixtures import server_fixture  # noqa: E402

server = server_fixture("--device", "cpu")


def test_weaviate_client_on_sies_port_is_told(server):
    port = urlparse(server.url).port
    with pytest.raises(Exception) as raised:
        weaviate.connect_to_local(port=port, grpc_port=1)
    message = str(raised.value)
    assert "Weaviate's API and this is an SIE server" in message and "port" in message
