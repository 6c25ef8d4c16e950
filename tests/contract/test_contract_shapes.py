"""The contract declared once (issue #26 part 5): a task's request struct decodes JSON and
msgpack bodies and validates Python calls alike, refusing the first wrong element with
its path; the OpenAPI schema derived from the same struct accepts what the decoder
accepts. No server here: tests/server/test_reliability_input.py sends the same refusals over HTTP."""

from __future__ import annotations

import math

import jsonschema
import msgpack
import orjson
import pytest

from sie_contract import Field, FieldError, Task
from sie_contract.builtin import ENCODE, EXTRACT, SCORE
from sie_contract.schemas import COMPONENTS, ref, task_schemas
from sie_contract.shapes import MAX_DIMS, EncodeItem, TextItem

# (task, body, the field the refusal names, a fragment of its message)
REFUSED = [
    # (an empty or blank text is a text: tests/engine/tasks/test_blank_texts.py)
    (ENCODE, {"items": [None]}, "items[0]", "must be a string or an object"),
    (ENCODE, {"items": [{"text": None}]}, "items[0].text", "is required"),
    (ENCODE, {"items": [{"text": 5}]}, "items[0].text", "must be a string, got int"),
    (ENCODE, {"items": [{"id": {"a": 1}, "text": "x"}]}, "items[0].id", "must be a string or an integer"),
    (ENCODE, {"items": [{"id": "i" * 600, "text": "x"}]}, "items[0].id", "longer than 512"),
    (ENCODE, {"items": [{"id": True, "text": "x"}]}, "items[0].id", "got bool"),
    (ENCODE, {"items": [{"text": "x", "vector": [1]}]}, "items[0]", "unknown fields ['vector']"),
    (ENCODE, {"items": [{"image": "aGk=", "document": "aGk="}]}, "items[0]", "both image and document"),
    (ENCODE, {"items": [{"image": 5}]}, "items[0].image", "must be bytes"),
    (ENCODE, {"items": ["x"], "normalise": True}, "normalise", "unknown field"),
    (ENCODE, {"items": []}, "items", "must not be empty"),
    (ENCODE, {"items": "x"}, "items", "must be a list"),
    (ENCODE, {"items": ["x"], "dims": 2**63}, "dims", f"between 1 and {MAX_DIMS}"),
    (ENCODE, {"items": ["x"], "dims": -1}, "dims", "between 1 and"),
    (ENCODE, {"items": ["x"], "dims": 2.5}, "dims", "must be an integer, got float"),
    (ENCODE, {"items": ["x"], "is_query": "true"}, "is_query", "must be true or false"),
    (ENCODE, {"items": ["x"], "output_types": ["dense", 5]}, "output_types",
     "output_types[1] must be one of dense, multivector, muvera, sparse"),
    (ENCODE, {"items": ["x"], "output_types": "vectors"}, "output_types", "must be one of dense"),
    (ENCODE, {"items": ["x"], "precision": "fp8"}, "precision", "must be one of bfloat16, float16, float32, int8"),
    (SCORE, {"query": {"text": "q", "boost": 2}, "items": ["x"]}, "query", "unknown fields ['boost']"),
    (SCORE, {"query": "q", "items": ["x"], "top_k": 1.5}, "top_k", "must be an integer"),
    (SCORE, {"query": "q", "items": ["x"], "top_k": 0}, "top_k", ">= 1"),
    (EXTRACT, {"items": ["x"], "labels": []}, "labels", "must not be empty"),
    (EXTRACT, {"items": ["x"], "labels": "person"}, "labels", "must be a list"),
    (EXTRACT, {"items": ["x"], "labels": ["person", ""]}, "labels[1]", "must not be empty"),
    (EXTRACT, {"items": ["x"], "labels": ["person", 7]}, "labels[1]", "must be a string, got int"),
    (EXTRACT, {"items": ["x"], "labels": ["a"], "threshold": 2}, "threshold", "between 0 and 1"),
    (EXTRACT, {"items": ["x"], "labels": ["a"], "normalize": False}, "normalize", "unknown field"),
    (EXTRACT, {"items": ["x"], "labels": ["a"], "classify": {"task": "t"}}, "classify.labels", "is required"),
    (EXTRACT, {"items": [{"text": "Ada", "entities": [{"start": 0, "end": "2", "label": "p"}]}], "labels": ["x"]},
     "items[0].entities[0].end", "must be an integer, got str"),
]


@pytest.mark.parametrize("task,body,field,fragment", REFUSED, ids=[f"{t.name}:{f}:{m}" for t, _, f, m in REFUSED])
@pytest.mark.parametrize("how", ["json", "msgpack", "python"])
def test_every_path_refuses_the_first_wrong_element_by_its_path(task, body, field, fragment, how):
    with pytest.raises(FieldError) as refused:
        if how == "python":
            task.request((), body)
        else:
            raw = msgpack.packb(body) if how == "msgpack" else orjson.dumps(body)
            task.fields_of(task.decode(raw, how == "msgpack"))
    assert refused.value.field == field, str(refused.value)
    assert fragment in str(refused.value)
    assert field in str(refused.value)


def test_non_finite_numbers_in_msgpack_are_refused():
    for body, field in (({"items": ["x"], "dims": math.nan}, "dims"),
                        ({"items": ["x"], "labels": ["a"], "threshold": math.nan}, "threshold")):
        task = ENCODE if "dims" in body else EXTRACT
        with pytest.raises(FieldError) as refused:
            task.decode(msgpack.packb(body), True)
        assert refused.value.field == field


def test_a_missing_required_field_is_named():
    with pytest.raises(FieldError, match="^items is required$"):
        ENCODE.fields_of(ENCODE.decode(b'{"items": null}', False))
    with pytest.raises(FieldError, match="items is required"):
        SCORE.request(("q",), {})


def test_labels_stay_positional_though_optional():
    """A fixed-label classifier takes no labels (the engine checks which models need them), and
    `extract(model, items, labels)` still binds them positionally."""
    assert EXTRACT.request((["x"],), {}) == {"items": ["x"]}
    assert EXTRACT.request((["x"], ["a"]), {}) == {"items": ["x"], "labels": ["a"]}
    assert list(EXTRACT.signature().parameters)[:3] == ["model", "items", "labels"]


def test_a_nullable_field_keeps_its_null():
    """top_k: null (every label, as transformers' pipeline) is not top_k left out."""
    sent = EXTRACT.fields_of(EXTRACT.decode(b'{"items": ["x"], "top_k": null, "threshold": null}', False))
    assert sent == {"items": ["x"], "top_k": None}
    assert EXTRACT.fields_of(EXTRACT.decode(msgpack.packb({"items": ["x"]}), True)) == {"items": ["x"]}


def test_fields_come_back_as_sent():
    """Fields not sent (or null) are absent; items keep their shapes; image bytes stay bytes."""
    body = {"items": ["a", {"text": "b", "id": 3}, {"id": None, "text": "c"}, {"image": b"\x89PNG"}],
            "is_query": True, "dims": None}
    decoded = ENCODE.fields_of(ENCODE.decode(msgpack.packb(body), True))
    assert decoded == {"items": ["a", {"text": "b", "id": 3}, {"text": "c"}, {"image": b"\x89PNG"}], "is_query": True}
    assert ENCODE.request((ENCODE.decode(msgpack.packb(body), True),), {}) == decoded
    python = ENCODE.request((("a", {"text": "b"}),), {"is_query": True, "dims": None})
    assert python == {"items": ("a", {"text": "b"}), "is_query": True}


def test_a_hostile_body_is_refused_at_its_first_wrong_element():
    """Deep nesting where a string belongs stops the decoder there (no recursion, nothing built)."""
    deep = b'{"items": [' + b'{"text": ' * 100_000 + b'"x"' + b"}" * 100_000 + b"]}"
    with pytest.raises(FieldError) as refused:
        ENCODE.decode(deep, False)
    assert refused.value.field == "items[0].text"
    with pytest.raises(FieldError):
        ENCODE.decode(b"\x91" * 100_000 + b"\x01", True)


def test_a_plugin_field_declared_by_schema_takes_any_value_but_unknown_fields_are_refused():
    task = Task(name="toy", summary="x", fields=(Field("items", ref("Items"), required=True),
                                                 Field("scale", {"type": "number"})),
                served_by=("dense",), implementation="m:f")
    assert task.fields_of(task.decode(b'{"items": ["a"], "scale": "anything"}', False)) == \
        {"items": ["a"], "scale": "anything"}
    with pytest.raises(FieldError) as refused:
        task.decode(b'{"items": ["a"], "scael": 1}', False)
    assert refused.value.field == "scael"
    assert task_schemas(task)["ToyRequest"]["properties"]["scale"] == {"type": "number"}


@pytest.mark.parametrize("task", [ENCODE, SCORE, EXTRACT], ids=lambda t: t.name)
def test_the_derived_schema_agrees_with_the_decoder(task):
    schemas = {**COMPONENTS, **task_schemas(task)}
    document = {"components": {"schemas": schemas}}
    validator = jsonschema.Draft202012Validator({**ref(f"{task.name.capitalize()}Request"), **document})
    request = schemas[f"{task.name.capitalize()}Request"]
    assert request["required"] == list(task.required)
    assert set(request["properties"]) == set(task.field_names)
    for t, body, _, _ in REFUSED:
        if t is task and "image" not in orjson.dumps(body).decode():
            assert not validator.is_valid(body), body
    good = {"encode": {"items": ["a", {"id": "x", "text": "b"}], "output_types": ["dense"], "dims": 8},
            "score": {"query": {"text": "q"}, "items": ["a"], "top_k": 1},
            "extract": {"items": [{"text": "Ada", "entities": [{"start": 0, "end": 3, "label": "p"}]}],
                        "labels": ["x"], "classify": {"task": "t", "labels": ["a"]}}}[task.name]
    validator.validate(good)
    task.decode(orjson.dumps(good), False)


def test_item_structs_describe_themselves():
    assert EncodeItem.__doc__ and TextItem.__doc__


@pytest.mark.parametrize("how", ["json", "msgpack", "python"])
def test_empty_and_blank_texts_are_texts(how):
    """'' and '   ' are items and queries like any other (#29.2): the decoder, the Python call and
    the derived schema take them; labels stay non-blank (a blank label names no class)."""
    bodies = [(ENCODE, {"items": ["", "   ", {"text": "\n"}]}), (SCORE, {"query": "", "items": ["", "x"]}),
              (EXTRACT, {"items": ["", {"text": " "}], "labels": ["person"]})]
    for task, body in bodies:
        if how == "python":
            assert task.request((), body)["items"] == body["items"]
        else:
            raw = msgpack.packb(body) if how == "msgpack" else orjson.dumps(body)
            assert task.fields_of(task.decode(raw, how == "msgpack"))["items"] == body["items"]
        schemas = {**COMPONENTS, **task_schemas(task)}
        jsonschema.Draft202012Validator({**ref(f"{task.name.capitalize()}Request"),
                                         "components": {"schemas": schemas}}).validate(body)
