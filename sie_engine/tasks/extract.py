"""The `extract` task: one verb over several kinds of model, each an `ExtractMode`
registered by the card output that selects it.

A mode declares what it is (for messages), what its `labels` hold, the optional request
fields it takes (sie_contract's EXTRACT fields), which of them are inputs of its own output
(GLiREL's item entities and entity model), the answer fields it fills, and its `run`. This
module picks a card's mode from its outputs (`MODES`, in order: the first a card names wins),
refuses every field the mode does not take with one message built from the declarations,
and runs it. The built-in modes:

- `relations`: GLiREL, relations between the items' entities (tasks/relations.py);
- `zeroshot`: NLI cross-encoders, zero-shot classification (tasks/zeroshot.py);
- `gliclass`: GLiClass, all labels and the text in one pass (tasks/gliclass.py);
- `gliner2`: GLiNER2, entities, relations and a classification in one pass (tasks/gliner2.py);
- `classifier`: fixed-label classifiers, the model's own labels (tasks/classify.py);
- `extract`: GLiNER, zero-shot entities (tasks/gliner.py);
- `generate`: document models (Donut), text and JSON read from page images and PDFs (tasks/generate.py).
- `detect`: OWLv2 and Grounding DINO, open-vocabulary object detection over image items (tasks/detect.py,
  tasks/grounded_detect.py).

`labels` is required by every mode but a fixed-label classifier's (`takes_labels`), which
refuses them: its labels are its own.

A plug-in adds one with `register(output, "module:MODE")`; the `extract` task is then served
by cards with that output (sie_contract's registry is told), and its heads are built by the
mode's `head` builder when it brings one.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sie_contract import registry as task_registry

from ..card import ModelCard
from ..errors import InvalidRequest, UnsupportedOutput
from ..models import HEADS
from ..types import ExtractResult
from .context import Call, TaskContext

TASK = "extract"
# not a top-level field: the `entities` of a relation model's items ({text, entities})
ITEM_ENTITIES = "items[].entities"
# ExtractedItem's answer fields
ANSWERS = frozenset({"entities", "classifications", "relations", "text", "data", "regions"})
LABELS = "labels"  # required by every mode but those that answer their own (`takes_labels`)


@dataclass(frozen=True)
class ExtractMode:
    """One kind of extract model.

    kind: what such a model is, in a sentence ("an NLI classifier").
    family: how "... applies to {family} models" names them ("NLI classifier").
    labels: what the request's `labels` hold for it ("candidate classes").
    fields: the optional request fields it takes besides items and labels (names of
        sie_contract's EXTRACT fields, or ITEM_ENTITIES).
    inputs: those of `fields` that are input for its own output rather than settings of the
        answer (GLiREL's entities, sent or found by an entity model): another mode refuses
        them as an output its model lacks (UnsupportedOutput, `unsupported_output`).
    answers: the answer fields it fills (of ANSWERS).
    run: `async run(engine, call) -> ExtractResult`, called once the fields are known to fit.
    example: a catalog model of this kind, named when a field of it is sent to another.
    head: `module:function` of the head builder of its output, for a mode whose output no
        built-in head serves (a plug-in's); registered in sie_engine.models.HEADS with the mode.
    hints: what to send instead, by field it refuses (GLiNER2's `multi_label`: classify.multi_label).
    takes_labels: False for a model that answers its own labels (a fixed-label classifier): a request
        giving labels is refused; True (the others): labels are required.
    takes_images: True for a mode whose items are images (a detector); the others refuse image items
        here, and it refuses text items itself."""

    kind: str
    family: str
    labels: str
    fields: frozenset[str]
    answers: frozenset[str]
    run: Callable[[TaskContext, Call], Awaitable[ExtractResult]]
    inputs: frozenset[str] = frozenset()
    example: str | None = None
    head: str | None = None
    hints: Mapping[str, str] = dataclasses.field(default_factory=dict)
    takes_labels: bool = True
    # what it answers over when it takes no labels (`takes_labels` False)
    own_labels: str = "its own labels, config.json's id2label"
    # whether its items are images (or PDFs, read page by page), not texts
    takes_images: bool = False

    def described(self, model: str) -> str:
        """`model 'x' is a GLiNER entity model (it takes its entity types in labels and answers entities)`."""
        answers = _join(sorted(self.answers))
        if not self.takes_labels:
            return f"model {model!r} is {self.kind} (it answers {answers} over {self.own_labels})"
        return f"model {model!r} is {self.kind} (it takes its {self.labels} in labels and answers {answers})"


# card output -> `module:attr` of its ExtractMode, imported when first used; the first entry a
# card's outputs name is its mode
MODES: dict[str, str] = {
    "relations": "sie_engine.tasks.relations:MODE",
    "zeroshot": "sie_engine.tasks.zeroshot:MODE",
    "gliclass": "sie_engine.tasks.gliclass:MODE",
    "gliner2": "sie_engine.tasks.gliner2:MODE",
    "classifier": "sie_engine.tasks.classify:MODE",
    "extract": "sie_engine.tasks.gliner:MODE",
    "generate": "sie_engine.tasks.generate:MODE",
    "detect": "sie_engine.tasks.detect:MODE",
    "layout": "sie_engine.tasks.layout:MODE",
}
_loaded: dict[str, ExtractMode] = {}  # by target


def mode(output: str) -> ExtractMode:
    """The registered mode of a card output (imported on first use)."""
    target = MODES[output]
    loaded = _loaded.get(target)
    if loaded is None:
        module, _, name = target.partition(":")
        loaded = getattr(importlib.import_module(module), name)
        _check(output, loaded)
        _loaded[target] = loaded
    return loaded


def mode_of(card: ModelCard) -> tuple[str, ExtractMode]:
    """The card's output that selects its mode, and the mode."""
    for output in MODES:
        if output in card.outputs:
            return output, mode(output)
    # unreachable through the engine: a card lists the task only when an output serves it
    raise UnsupportedOutput(f"model {card.id!r} has no extract output (its outputs: {', '.join(card.outputs)})",
                            field="model")


def register(output: str, target: str) -> ExtractMode:
    """Add a mode (or replace the one of `output`): cards with that output then serve `extract`.
    `target` is the mode's `module:attr`; it is imported now, so a bad declaration fails here."""
    previous = MODES.get(output)
    MODES[output] = target
    try:
        added = mode(output)
    except Exception:
        if previous is None:
            MODES.pop(output, None)
        else:
            MODES[output] = previous
        raise
    if added.head is not None:
        HEADS[output] = added.head
    task = task_registry.get(TASK)
    if task is not None and output not in task.served_by:
        task_registry.register(dataclasses.replace(task, served_by=(*task.served_by, output)))
    return added


def unregister(output: str) -> None:
    """Remove a plug-in's mode (and what `register` added for it)."""
    target = MODES.pop(output, None)
    if target is None:
        return
    loaded = _loaded.pop(target, None)
    if loaded is not None and loaded.head is not None and HEADS.get(output) == loaded.head:
        del HEADS[output]
    task = task_registry.get(TASK)
    if task is not None and output in task.served_by:
        task_registry.register(dataclasses.replace(task, served_by=tuple(o for o in task.served_by if o != output)))


def _check(output: str, declared: Any) -> None:
    """A mode's declaration names only fields and answers the contract has."""
    if not isinstance(declared, ExtractMode):
        raise TypeError(f"extract mode {output!r}: {MODES[output]} is not an ExtractMode")
    task = task_registry.get(TASK)
    known = set(task.optional if task is not None else ()) | {ITEM_ENTITIES}
    unknown = sorted((declared.fields | declared.inputs) - known)
    if unknown:
        raise ValueError(f"extract mode {output!r} declares fields the extract task does not have: "
                         f"{', '.join(unknown)} (fields: {', '.join(sorted(known))})")
    if not declared.inputs <= declared.fields:
        raise ValueError(f"extract mode {output!r}: its inputs must be among its fields")
    if not declared.answers or not declared.answers <= ANSWERS:
        raise ValueError(f"extract mode {output!r}: answers must be some of {', '.join(sorted(ANSWERS))}")


def sent_fields(fields: Mapping[str, Any]) -> list[str]:
    """The optional fields a request sends (not None), in the contract's order; ITEM_ENTITIES
    first when an item carries entities."""
    items = fields.get("items")
    sent = [ITEM_ENTITIES] if isinstance(items, list) and any(
        isinstance(item, dict) and "entities" in item for item in items) else []
    task = task_registry.get(TASK)
    names = task.optional if task is not None else tuple(fields)
    return sent + [name for name in names if fields.get(name) is not None and name != LABELS]


def refuse_other_fields(card: ModelCard, chosen: ExtractMode, fields: Mapping[str, Any]) -> None:
    """InvalidRequest (UnsupportedOutput for another mode's inputs) for the first field sent that
    the card's mode does not take, naming the kinds of model that take it and what this one is."""
    for name in sent_fields(fields):
        if name in chosen.fields:
            continue
        takers = [(o, mode(o)) for o in MODES if name in mode(o).fields]
        families = _join([m.family for _, m in takers]) or "no served"
        this = chosen.described(card.id)
        field = "items" if name == ITEM_ENTITIES else name
        inputs_of = [(o, m) for o, m in takers if name in m.inputs]
        if inputs_of:
            other, taker = inputs_of[0]
            example = f" (e.g. {taker.example})" if taker.example else ""
            raise UnsupportedOutput(f"model {card.id!r} has no {other} output: {name} applies to {families} "
                                    f"models{example}; {chosen.described(card.id)}", field=field)
        hint = f"; {chosen.hints[name]}" if name in chosen.hints else ""
        raise InvalidRequest(f"{name} applies to {families} models; {this}{hint}", field=field)


def _join(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c` (duplicates once)."""
    unique = list(dict.fromkeys(names))
    if len(unique) < 2:
        return "".join(unique)
    return ", ".join(unique[:-1]) + " and " + unique[-1]


def check_labels_sent(card: ModelCard, chosen: ExtractMode, fields: Mapping[str, Any]) -> None:
    """InvalidRequest unless labels are sent to a mode that takes them, and only to one."""
    sent = fields.get(LABELS) is not None
    if chosen.takes_labels and not sent:
        raise InvalidRequest(f"labels is required: {chosen.described(card.id)}", field=LABELS)
    if not chosen.takes_labels and sent:
        raise InvalidRequest(f"labels does not apply: {chosen.described(card.id)}; send no labels (for candidate "
                             "classes of your own, use a zero-shot classifier: an NLI or GLiClass model)", field=LABELS)


def refuse_images(card: ModelCard, chosen: ExtractMode, fields: Mapping[str, Any]) -> None:
    """InvalidRequest for the first image or document item sent to a mode whose items are texts."""
    if chosen.takes_images:
        return
    items = fields.get("items")
    for i, item in enumerate(items if isinstance(items, list) else ()):
        kind = next((k for k in ("image", "document") if isinstance(item, dict) and item.get(k) is not None), None)
        if kind is not None:
            raise InvalidRequest(f"items[{i}] is {'a document' if kind == 'document' else 'an image'}, but "
                                 f"{chosen.described(card.id)}; send texts, or use a document model (Donut) to "
                                 f"read {kind}s or an open-vocabulary detector (OWLv2, Grounding DINO) to find labels "
                                 "in images",
                                 field=f"items[{i}].{kind}")


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    _, chosen = mode_of(call.card)
    refuse_images(call.card, chosen, call.fields)
    check_labels_sent(call.card, chosen, call.fields)
    refuse_other_fields(call.card, chosen, call.fields)
    return await chosen.run(engine, call)
