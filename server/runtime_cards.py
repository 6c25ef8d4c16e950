"""Model cards added at run time (`POST /v1/configs/models`): read from a request body, checked
as `--models` card files are, and kept in `--config-dir` so a restarted pod serves them again.

The engine server and the router both use this: the same parsing (so both refuse the same cards
with the same words) and the same digest of a card, by which the router tells whether a worker
already serves its cards (`GET /v1/status` lists the digests of the worker's runtime cards).

The directory holds one file, `models.yaml` (`models: [card, ...]`, the cards' schema), written
whole to a temporary file, flushed and renamed over the old one: a crash leaves the old set or the
new one, never half of either.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from sie_engine.card import ModelCard, parse_card
from sie_engine.errors import InvalidRequest

from .auth import ApiKeys
from .errors import HTTPProblem

FILE_NAME = "models.yaml"
PREFIX = "/v1/configs/models"
# Cards one request may add: a bound on what a body makes the server parse and keep.
MAX_CARDS = 1024
# Admin bodies are cards, not work: a bound of their own, well below --max-body-bytes' default.
MAX_ADMIN_BODY = 4 * 2**20


def refusal(admin_keys: ApiKeys, authorization: str | None) -> HTTPProblem | None:
    """Why an admin call is refused (None: it may pass): 403 while no admin key file is configured,
    401 for a missing or wrong admin key. The engine server's and the router's words."""
    if not admin_keys.enabled:
        return HTTPProblem("forbidden", "the admin API is off: start the server with --admin-key-file PATH (a file "
                                        "of admin keys, one per line, or its environment variable) and send "
                                        "`Authorization: Bearer <admin key>`; the API key never grants it")
    if not admin_keys.check(authorization):
        return HTTPProblem("unauthorized", "missing or wrong admin key: send `Authorization: Bearer <admin key>` "
                                           "with a key of the --admin-key-file file")
    return None


def card_list(cards: list[ModelCard]) -> dict:
    """The answer of `GET /v1/configs/models`."""
    return {"object": "list", "models": [card.to_dict() for card in cards]}


def cards_of_body(body: Any) -> list[ModelCard]:
    """The cards of an admin body (one card, a list of cards, or `{"models": [...]}` as GET
    answers), every one checked before any is applied. InvalidRequest (400) names the first bad
    card as `--models` names a bad file, and what is wrong with it."""
    if isinstance(body, dict) and set(body) == {"models"}:
        body = body["models"]
    entries = body if isinstance(body, list) else [body]
    if not entries:
        raise InvalidRequest("the body holds no card: send one card or a list of cards (the schema of "
                             "--models card files)")
    if len(entries) > MAX_CARDS:
        raise InvalidRequest(f"the body holds {len(entries)} cards; at most {MAX_CARDS} per request")
    cards: list[ModelCard] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"body[{index}]" if isinstance(body, list) else "body"
        try:
            card = parse_card(entry, where)
        except ValueError as exc:
            raise InvalidRequest(str(exc), field=where if isinstance(body, list) else None) from None
        if not isinstance(card.id, str) or not card.id or len(card.id) > 256:
            raise InvalidRequest(f"invalid model card {where}: id must be a non-empty string of at most 256 "
                                 "characters")
        if card.id in seen:
            raise InvalidRequest(f"invalid model card {where}: id {card.id!r} appears twice in the body")
        seen.add(card.id)
        cards.append(card)
    return cards


def digest(card: ModelCard) -> str:
    """A short fingerprint of everything a card says (the router compares its own with a worker's)."""
    text = json.dumps(card.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class RuntimeCards:
    """The runtime cards by id, persisted in `directory` when one is given (else in memory only).
    Reading and writing touch the disk: call them on a worker thread once serving."""

    def __init__(self, directory: Path | None = None):
        self.directory = Path(directory) if directory is not None else None
        self._cards: dict[str, ModelCard] = {}
        self._digests: dict[str, str] = {}  # the router asks every poll: computed once per change

    @property
    def path(self) -> Path | None:
        return self.directory / FILE_NAME if self.directory is not None else None

    def load(self) -> list[ModelCard]:
        """Read the persisted cards (none when there is no directory or no file yet). ValueError
        names the file and the bad card, as a bad `--models` file is named."""
        path = self.path
        if path is None:
            return []
        if not path.exists():
            self._check_writable()
            return []
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ValueError(f"--config-dir {self.directory}: cannot read {path}: {exc}") from None
        entries = data.get("models") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise ValueError(f"--config-dir {self.directory}: {path} is not `models: [card, ...]`")
        cards = [parse_card(entry, f"{path} models[{i}]") for i, entry in enumerate(entries)]
        self._set({card.id: card for card in cards})
        return cards

    def _set(self, cards: dict[str, ModelCard]) -> None:
        self._cards = cards
        self._digests = {card_id: digest(card) for card_id, card in sorted(cards.items())}

    def _check_writable(self) -> None:
        assert self.directory is not None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"--config-dir {self.directory}: cannot create it: {exc.strerror or exc}") from None
        if not os.access(self.directory, os.W_OK):
            raise ValueError(f"--config-dir {self.directory}: not writable by this process")

    def cards(self) -> list[ModelCard]:
        return sorted(self._cards.values(), key=lambda c: c.id)

    def get(self, model_id: str) -> ModelCard | None:
        return self._cards.get(model_id)

    def digests(self) -> dict[str, str]:
        return dict(self._digests)

    def put(self, cards: Iterable[ModelCard]) -> None:
        """Add or replace cards, persisted before this returns."""
        updated = {**self._cards, **{card.id: card for card in cards}}
        self._write(updated)
        self._set(updated)

    def remove(self, model_id: str) -> ModelCard | None:
        """Forget a card, persisted before this returns; the card, or None when it was not one."""
        if model_id not in self._cards:
            return None
        updated = dict(self._cards)
        removed = updated.pop(model_id)
        self._write(updated)
        self._set(updated)
        return removed

    def _write(self, cards: dict[str, ModelCard]) -> None:
        path = self.path
        if path is None:
            return
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump({"models": [cards[k].to_dict() for k in sorted(cards)]}, sort_keys=False)
        fd, temporary = tempfile.mkstemp(prefix=".models-", suffix=".yaml", dir=self.directory)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        try:  # the rename itself survives a power cut once the directory is flushed
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError:
            pass
