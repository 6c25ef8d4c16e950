"""What a task is: a verb of the API (`encode`, `score`, `extract`, and whatever a
plug-in adds), declared once. Its entry names the request fields (with their JSON
Schema), the answer's schema, which model outputs serve it and where the engine's
implementation lives; `registry` holds the entries.

The engine's implementation is named by a `module:function` string and imported
only when first used (as vLLM's model registry does), so the contract stays
torch-free and the client can read it without the engine installed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Mapping


class FieldError(TypeError):
    """A call whose arguments do not fit the task's fields; `field` names the offending one."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Field:
    """One request field of a task. `schema` is its JSON Schema (for OpenAPI)."""

    name: str
    schema: Mapping[str, Any]
    required: bool = False
    description: str = ""


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
    answer_schema: JSON Schema of the answer (the result's fields, `usage` for tokens).
    chunk_field: the list field a client may split across several requests (None: never split).
    """

    name: str
    summary: str
    fields: tuple[Field, ...]
    served_by: tuple[str, ...]
    implementation: str
    answer_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    chunk_field: str | None = "items"

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.required)

    @property
    def optional(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if not f.required)

    def route(self, model: str = "{model}") -> str:
        return f"/v1/{self.name}/{model}"

    def request(self, args: tuple, options: Mapping[str, Any]) -> dict[str, Any]:
        """A Python call's positional and keyword arguments -> the request's fields.

        Raises FieldError (a TypeError, as a Python call would) for surplus positional
        arguments, an unknown keyword or a missing required field, naming the field."""
        required = self.required
        if len(args) > len(required):
            raise FieldError(f"{self.name}() takes model and {len(required)} positional field(s) "
                             f"({', '.join(required)}), got {len(args)}")
        request = dict(zip(required, args))
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
        return request

    def signature(self, *extra: inspect.Parameter) -> inspect.Signature:
        """The Python call's signature (for help() and editors): model, the required fields
        positionally, the optional ones by keyword, then `extra` keyword parameters."""
        kind = inspect.Parameter
        params = [kind("model", kind.POSITIONAL_OR_KEYWORD)]
        params += [kind(f.name, kind.POSITIONAL_OR_KEYWORD) for f in self.fields if f.required]
        params += [kind(f.name, kind.KEYWORD_ONLY, default=None) for f in self.fields if not f.required]
        return inspect.Signature(params + list(extra))

    def doc(self) -> str:
        lines = [f"{self.summary}.", "", "Fields (docs/api.md has the details):"]
        for f in self.fields:
            flag = "required" if f.required else "optional"
            lines.append(f"  {f.name} ({flag}){': ' + f.description if f.description else ''}")
        return "\n".join(lines)
