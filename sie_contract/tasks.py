"""What a task is: a verb of the API (`encode`, `score`, `extract`, and whatever a
plug-in adds), declared once. Its entry names the request fields (each with its type),
the answer's type, which model outputs serve it and where the engine's implementation
lives; `registry` holds the entries.

From the fields comes one request struct per task (msgspec), so the server's decoding
(JSON and msgpack bytes straight into the struct), the Python call's validation
(`Task.request`, which `Engine.run` calls) and the OpenAPI schema are the same
declaration; `errors.field_error` words a refusal with the field's path.

The engine's implementation is named by a `module:function` string and imported
only when first used (as vLLM's model registry does), so the contract stays
torch-free and the client can read it without the engine installed.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Optional, Union

import msgspec

from .shapes import plain
from .validate import FieldError, field_error

__all__ = ["Field", "FieldError", "Task"]


@dataclass(frozen=True)
class Field:
    """One request field of a task.

    type: what the field takes (a type msgspec decodes: `str`, `list[Label]`, a Struct, an
        `Annotated[..., Meta(...)]` with bounds); it validates the field and gives its JSON
        Schema. `Any` (a plug-in that gives only a schema) takes any value.
    schema: a JSON Schema of the field's own, for a field typed `Any`; None: the type's.
    wire_type: the type a body is decoded into, where it differs from `type` (None: `type`):
        the same values, taken so that a hostile body builds nothing (shapes.WireEncodeItem).
    positional: an optional field the Python call still takes positionally, after the required
        ones (extract's `labels`, which a fixed-label classifier does without).
    nullable: `null` is a value of its own, not the field left out (extract's `top_k: null`,
        every label, as transformers' pipeline spells it); it comes through as None in the fields.
    """

    name: str
    schema: Mapping[str, Any] | None = None
    required: bool = False
    description: str = ""
    type: Any = Any
    wire_type: Any = None
    positional: bool = False
    nullable: bool = False

    def member(self, wire: bool = False) -> tuple[str, Any, Any]:
        """The request struct's member: `(name, type, default)`. A field not sent is None (UNSET for
        a nullable one, so that its null survives decoding)."""
        kind = (self.wire_type or self.type) if wire else self.type
        if self.nullable:
            return self.name, Union[kind, None, msgspec.UnsetType], msgspec.UNSET  # noqa: UP007
        # Optional[], not `| None`: a field declared by a JSON Schema alone has type Any, which `|` refuses on 3.10
        return self.name, Optional[kind], None  # noqa: UP045


@dataclass(frozen=True)
class Task:
    """name: the verb; the route is `POST /v1/{name}/{model}` and the Python call
        `engine.{name}(model, <required fields>, **<optional fields>)`.
    fields: the request body's fields; the required ones first, in the order the
        Python call takes them positionally.
    served_by: model outputs that serve the task (a card whose outputs include one of
        them lists the task).
    implementation: `module:function` of the engine's `async def run(engine, model,
        request: dict, timeout) -> result`.
    answer_type: the answer's struct (its JSON Schema is the OpenAPI answer); None with
        `answer_schema` for a plug-in that writes its schema by hand.
    answer_schema: JSON Schema of the answer when there is no `answer_type`.
    chunk_field: the list field a client may split across several requests (None: never split).
    """

    name: str
    summary: str
    fields: tuple[Field, ...]
    served_by: tuple[str, ...]
    implementation: str
    answer_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    chunk_field: str | None = "items"
    answer_type: type[Any] | None = None

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.required)

    @property
    def optional(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if not f.required)

    @property
    def positional(self) -> tuple[str, ...]:
        """The fields the Python call takes positionally: the required ones, then `positional` optional ones."""
        return tuple(f.name for f in self.fields if f.required or f.positional)

    def route(self, model: str = "{model}") -> str:
        return f"/v1/{self.name}/{model}"

    # ---- the request struct ------------------------------------------------
    @cached_property
    def request_type(self) -> type[msgspec.Struct]:
        """`{Name}Request`: every field optional (null is a field not sent, but for a nullable one),
        unknown ones refused."""
        members = [f.member() for f in self.fields]
        return msgspec.defstruct(f"{self.name.capitalize()}Request", members, forbid_unknown_fields=True,
                                 omit_defaults=True, kw_only=True, module=__name__)

    @cached_property
    def wire_request_type(self) -> type[msgspec.Struct]:
        """`request_type` with each field's `wire_type`: what a body is decoded into."""
        if all(f.wire_type is None for f in self.fields):
            return self.request_type
        members = [f.member(wire=True) for f in self.fields]
        return msgspec.defstruct(f"{self.name.capitalize()}WireRequest", members, forbid_unknown_fields=True,
                                 omit_defaults=True, kw_only=True, module=__name__)

    @cached_property
    def json_decoder(self) -> msgspec.json.Decoder[Any]:
        return msgspec.json.Decoder(self.wire_request_type)

    @cached_property
    def msgpack_decoder(self) -> msgspec.msgpack.Decoder[Any]:
        return msgspec.msgpack.Decoder(self.wire_request_type)

    def decode(self, raw: bytes, is_msgpack: bool) -> msgspec.Struct:
        """A request body's bytes -> the request struct. Raises msgspec's DecodeError for
        bytes that are not JSON / msgpack and FieldError (with the path) for a body that does
        not fit the fields, at its first wrong element."""
        decoder = self.msgpack_decoder if is_msgpack else self.json_decoder
        try:
            struct: msgspec.Struct = decoder.decode(raw)
        except msgspec.ValidationError as exc:
            raise field_error(exc, self.wire_request_type) from None
        return struct

    def fields_of(self, struct: msgspec.Struct) -> dict[str, Any]:
        """A decoded request -> the fields sent (name -> plain value, as a JSON parser makes
        them; fields not sent or sent as null are absent). FieldError for a missing required one."""
        fields: dict[str, Any] = plain(struct)
        for name in self.required:
            if name not in fields:
                raise FieldError(f"{name} is required", name)
        return fields

    def validate(self, fields: Mapping[str, Any]) -> None:
        """FieldError (with the path) unless `fields` (Python values) fit the task's fields."""
        try:
            msgspec.convert(fields, self.request_type)
        except msgspec.ValidationError as exc:
            raise field_error(exc, self.request_type) from None

    # ---- the Python call ---------------------------------------------------
    def bind(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> dict[str, Any]:
        """A Python call's positional and keyword arguments -> the fields given (None: not
        given), not yet validated. FieldError (a TypeError, as a Python call would raise) for
        surplus positional arguments, an unknown keyword or a missing required field."""
        required, positional = self.required, self.positional
        if len(args) > len(positional):
            raise FieldError(f"{self.name}() takes model and {len(positional)} positional field(s) "
                             f"({', '.join(positional)}), got {len(args)}")
        request = dict(zip(positional, args))
        for name, value in options.items():
            if name not in self.field_names:
                raise FieldError(f"{self.name}() got an unknown field {name!r} "
                                 f"(fields: {', '.join(self.field_names)})", name)
            if name in request:
                raise FieldError(f"{self.name}() got {name!r} both positionally and by name", name)
            request[name] = value
        missing = [name for name in required if request.get(name) is None]
        if missing:
            raise FieldError(f"{missing[0]} is required ({self.name}() takes {', '.join(required)})", missing[0])
        return {name: value for name, value in request.items() if value is not None}

    def request(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> dict[str, Any]:
        """A call's arguments -> the request's fields, validated against the fields' types.

        `args` is either the Python call's positional fields (with `options` its keyword
        fields), or one request struct the server decoded (already validated). The fields
        come back as given (name -> value; fields not given are absent). Raises FieldError
        naming the field (its path, e.g. `items[3].text`)."""
        if len(args) == 1 and not options and isinstance(args[0], (self.request_type, self.wire_request_type)):
            return self.fields_of(args[0])
        fields = self.bind(args, options)
        self.validate(fields)
        return fields

    def signature(self, *extra: inspect.Parameter) -> inspect.Signature:
        """The Python call's signature (for help() and editors): model, the required fields
        positionally, the optional ones by keyword, then `extra` keyword parameters."""
        kind = inspect.Parameter
        params = [kind("model", kind.POSITIONAL_OR_KEYWORD)]
        params += [kind(f.name, kind.POSITIONAL_OR_KEYWORD) for f in self.fields if f.required]
        params += [kind(f.name, kind.POSITIONAL_OR_KEYWORD, default=None) for f in self.fields
                   if f.positional and not f.required]
        params += [kind(f.name, kind.KEYWORD_ONLY, default=None) for f in self.fields
                   if not (f.required or f.positional)]
        return inspect.Signature(params + list(extra))

    def doc(self) -> str:
        lines = [f"{self.summary}.", "", "Fields (docs/api.md has the details):"]
        for f in self.fields:
            flag = "required" if f.required else "optional"
            lines.append(f"  {f.name} ({flag}){': ' + f.description if f.description else ''}")
        return "\n".join(lines)
