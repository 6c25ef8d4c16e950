"""msgspec's validation errors -> refusals that name the field by its path and say what
to send instead (`items[3].text must be a string, got int`).

msgspec reports `<what> - at `$.items[3].text``; the declared type at that path (read with
`msgspec.inspect`) gives the words: the choices of an enum, the bounds of a number. Two
conventions of the API shape the path: a plain string item stands for `{text}`, so an
empty one is `items[3].text`; a list of choices (`output_types`) is named as a whole.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import msgspec.inspect as mi

_WHERE = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`(?:, got `(?P<got>[^`]+)`)?(?P<rest>.*)$", re.S)
_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false", "array": "a list",
          "object": "an object", "bytes": "bytes", "null": "null"}


class FieldError(TypeError):
    """A request whose fields do not fit the task's; `field` names the offending one (its
    path: `items[3].text`). A TypeError, as a Python call with a wrong argument raises."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def field_error(exc: msgspec.ValidationError, root: type) -> FieldError:
    """The refusal for a validation error of a request struct of type `root`."""
    match = _WHERE.match(str(exc))
    what = match.group("what") if match else str(exc)
    segments = _segments(match.group("path") if match and match.group("path") else "")
    if what.startswith("@"):  # a struct's own check (shapes.Refusal): "@member: message"
        member, _, what = what[1:].partition(": ")
        path = _path([*segments, member] if member else segments)
        return FieldError(f"{path} {what}", path)
    if not segments and what.startswith("Object contains unknown field"):
        name = what.split("`")[1]
        allowed = [f.name for f in _struct_fields(mi.type_info(root))]
        return FieldError(f"unknown field(s) {name}; allowed: {', '.join(allowed)}", name)
    if not segments and what.startswith("Expected `object`"):
        got = _EXPECTED.match(what)
        return FieldError(f"the body must be an object, got {got.group('got') if got else 'something else'}")
    node, parent = _node_at(mi.type_info(root), segments)
    return _refusal(what, segments, node, parent)


def _refusal(what: str, segments: list[Any], node: mi.Type | None, parent: mi.Type | None) -> FieldError:
    if what.startswith("Object missing required field"):
        segments = [*segments, what.split("`")[1]]
        path = _path(segments)
        return FieldError(f"{path} is required", path)
    if what.startswith("Object contains unknown field"):
        path = _path(segments)
        allowed = ", ".join(f.name for f in _struct_fields(node)) if node is not None else ""
        return FieldError(f"{path} has unknown fields [{what.split('`')[1]!r}] (allowed: {allowed})", path)
    choices = _choices(node)
    if choices and any(isinstance(o, mi.ListType) for o in _options(parent)):  # a list of choices: named whole
        path = _path(segments[:-1])
        return FieldError(f"{_path(segments)} must be one of {', '.join(choices)}{_got(what)}", path)
    if choices:
        path = _path(segments)
        return FieldError(f"{path} must be one of {', '.join(choices)}{_got(what)}", path)
    expected = _EXPECTED.match(what)
    if expected and expected.group("rest").strip().startswith(("of length >= 1", "matching regex")) \
            and _is_string_shorthand(node):
        segments = [*segments, "text"]  # a plain string item is its {text}
    path = _path(segments)
    if expected is None:
        return FieldError(f"{path}: {what[0].lower() + what[1:]}" if path else what, path or None)
    want, got, rest = expected.group("want"), expected.group("got"), expected.group("rest").strip()
    if got:
        return FieldError(f"{path} must be {_describe(want)}, got {got}", path)
    return FieldError(f"{path} {_bound(want, rest, node)}", path)


def _bound(want: str, rest: str, node: mi.Type | None) -> str:
    """`of length >= 1` / `>= 0.0` / `matching regex` -> what the value must be."""
    if rest == "of length >= 1":
        return "must not be empty"
    if rest.startswith("matching regex"):
        return "must not be blank"
    if rest.startswith("of length <="):
        return f"is longer than {rest.split()[-1]} {'characters' if want == 'str' else 'entries'}"
    low, high = _limits(node)
    if low is not None and high is not None:
        return f"must be {_describe(want)} between {low:g} and {high:g}"
    return f"must be {_describe(want)} {rest}"


def _segments(path: str) -> list[Any]:
    return [name if name else int(index) for name, index in _SEGMENT.findall(path)]


def _path(segments: list[Any]) -> str:
    out = ""
    for segment in segments:
        out += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if out else segment)
    return out


def _describe(want: str) -> str:
    kinds = sorted((k.strip() for k in want.split("|") if k.strip() != "null"),
                   key=lambda k: list(_WORDS).index(k) if k in _WORDS else len(_WORDS))
    return " or ".join(_WORDS.get(k, f"`{k}`") for k in kinds) or "null"


def _got(what: str) -> str:
    if what.startswith("Invalid enum value"):
        return f", got {what[len('Invalid enum value '):]}"
    expected = _EXPECTED.match(what)
    return f", got {expected.group('got')}" if expected and expected.group("got") else ""


def _bare(node: mi.Type | None) -> mi.Type | None:
    """A type without its `Meta(extra_json_schema=...)` wrapping (msgspec's `Metadata`)."""
    while isinstance(node, mi.Metadata):
        node = node.type
    return node


def _strip_none(node: mi.Type | None) -> mi.Type | None:
    """A `T | None` as T (null is a field not sent); other unions as they are."""
    node = _bare(node)
    if isinstance(node, mi.UnionType):
        kept = [b for b in map(_bare, node.types) if b is not None and not isinstance(b, mi.NoneType)]
        return kept[0] if len(kept) == 1 else mi.UnionType(tuple(kept))
    return node


def _options(node: mi.Type | None) -> list[mi.Type]:
    node = _strip_none(node)
    if node is None:
        return []
    options = list(node.types) if isinstance(node, mi.UnionType) else [node]
    return [bare for bare in map(_bare, options) if bare is not None]


def _struct_fields(node: mi.Type | None) -> list[mi.Field]:
    return [f for option in _options(node) if isinstance(option, mi.StructType) for f in option.fields]


def _node_at(node: mi.Type, segments: list[Any]) -> tuple[mi.Type | None, mi.Type | None]:
    """The declared type at a path and its parent's (None where the path leaves the declaration)."""
    parent: mi.Type | None = None
    current: mi.Type | None = node
    for segment in segments:
        parent, current = current, _child(current, segment)
        if current is None:
            break
    return current, parent


def _child(node: mi.Type | None, segment: Any) -> mi.Type | None:
    for option in _options(node):
        if isinstance(segment, int) and isinstance(option, (mi.ListType, mi.SetType, mi.VarTupleType)):
            return option.item_type
        if isinstance(segment, str) and isinstance(option, mi.StructType):
            for f in option.fields:
                if f.name == segment:
                    return f.type
    return None


def _choices(node: mi.Type | None) -> list[str]:
    return [str(v) for option in _options(node) if isinstance(option, mi.LiteralType) for v in option.values]


def _limits(node: mi.Type | None) -> tuple[float | None, float | None]:
    for option in _options(node):
        if isinstance(option, (mi.IntType, mi.FloatType)):
            low = option.ge if option.ge is not None else option.gt
            high = option.le if option.le is not None else option.lt
            return low, high
    return None, None


def _is_string_shorthand(node: mi.Type | None) -> bool:
    """A `str | {text, ...}` union (items, a query): the string stands for the object's text."""
    options = _options(node)
    return any(isinstance(o, mi.StrType) for o in options) and any(f.name == "text" for f in _struct_fields(node))
