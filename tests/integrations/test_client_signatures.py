"""The typed client's calls are written once in Python (so editors and mypy see their
parameters), and held here to the contract's declaration: a field added to, renamed in or
removed from a task in `sie_contract` fails this test until the typed call follows."""

from __future__ import annotations

import inspect

import pytest

from sie_client import AsyncSIEClient, SIEClient
from sie_client.client import _Base
from sie_contract.registry import get as get_task

# keyword parameters that are the client's own (how it sends), not fields of the request
CLIENT_ONLY = ("batch_size", "progress")


def _shape(params) -> tuple[list[str], set[str]]:
    """(positional names in order, keyword-only names): keyword order is the writer's choice."""
    params = [p for p in params if p.name not in CLIENT_ONLY]
    keyword = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return [p.name for p in params if p.name not in keyword], keyword


@pytest.mark.parametrize("name", ["encode", "score", "extract"])
def test_typed_call_takes_exactly_the_declared_fields(name):
    declared = _shape(get_task(name).signature().parameters.values())
    typed = _shape(list(inspect.signature(getattr(_Base, name)).parameters.values())[1:])  # without self
    assert typed == declared


@pytest.mark.parametrize("client", [SIEClient, AsyncSIEClient])
@pytest.mark.parametrize("name", ["encode", "score", "extract"])
def test_both_clients_inherit_the_one_declaration(client, name):
    assert getattr(client, name) is getattr(_Base, name)


@pytest.mark.parametrize("name", ["encode", "score", "extract"])
def test_typed_call_keeps_the_client_options_keyword_only(name):
    params = inspect.signature(getattr(_Base, name)).parameters
    for option in CLIENT_ONLY:
        assert params[option].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[option].default is None
