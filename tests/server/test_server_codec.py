"""Wire format, content negotiation, API keys and the contract tables, without a
server: the pieces the HTTP tests rely on, checked directly and cheaply."""

from __future__ import annotations

import re

import msgpack
import numpy as np
import orjson
import pytest
from aiohttp.test_utils import make_mocked_request

from checkout import REPO
from sie_engine.postprocess import convert_dtype
from sie_engine.types import (
    EncodedItem,
    EncodeResult,
    Entity,
    ExtractedItem,
    ExtractResult,
    ScoredItem,
    ScoreResult,
    SparseVector,
)
from sie_server import codec
from sie_server.auth import ApiKeys, keys_from_env
from sie_server.errors import STATUS_BY_CODE
from sie_server.metrics import ServerMetrics

API_MD = REPO / "docs" / "api.md"


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int32"])
def test_tensor_objects_round_trip_little_endian(dtype):
    array = (np.arange(24).reshape(4, 6) - 12).astype(dtype)
    obj = msgpack.unpackb(msgpack.packb(codec.tensor(array)))
    assert obj["dtype"] == dtype and obj["shape"] == [4, 6]
    assert obj["data"] == array.astype(np.dtype(dtype).newbyteorder("<")).tobytes()
    assert np.array_equal(codec.decode_tensor(obj), array)


def test_every_output_kind_in_both_formats():
    rng = np.random.default_rng(0)
    vector = rng.standard_normal(16).astype(np.float32)
    quantized = convert_dtype(vector, "int8")
    sparse = SparseVector(np.array([5, 9], dtype=np.int64), np.array([0.5, 0.25], dtype=np.float32))
    matrix = rng.standard_normal((3, 4)).astype(np.float32)
    result = EncodeResult("m", [EncodedItem("a", dense=quantized, sparse=sparse, multivector=matrix)], tokens=7)

    as_json = orjson.loads(orjson.dumps(codec.task_answer(result, codec.JSON)[0], option=orjson.OPT_SERIALIZE_NUMPY))
    item = as_json["items"][0]
    assert item["dense"]["data"] == quantized.data.tolist() and item["dense"]["scale"] == pytest.approx(quantized.scale)
    assert item["sparse"] == {"indices": [5, 9], "values": [0.5, 0.25]}
    assert np.array_equal(np.array(item["multivector"], dtype=np.float32), matrix)  # float32 text round-trips exactly
    assert as_json["usage"] == {"tokens": 7}

    payload, nbytes = codec.task_answer(result, codec.MSGPACK)
    item = msgpack.unpackb(msgpack.packb(payload, use_bin_type=True))["items"][0]
    assert np.array_equal(codec.decode_tensor(item["dense"]), quantized.data) and item["dense"]["dtype"] == "int8"
    assert item["dense"]["scale"] == pytest.approx(quantized.scale)
    assert codec.decode_tensor(item["sparse"]["indices"]).dtype == np.int32
    assert np.array_equal(codec.decode_tensor(item["multivector"]), matrix)
    assert nbytes == quantized.data.nbytes + 2 * 4 + 2 * 4 + matrix.nbytes  # sparse: int32 ids, float32 values


def test_score_and_extract_answers_are_plain():
    score = ScoreResult("ce", [ScoredItem("b", 1, np.float32(0.75), 0), ScoredItem("a", 0, 0.5, 1)], tokens=9)
    assert codec.task_answer(score, codec.JSON)[0] == {"model": "ce", "usage": {"tokens": 9}, "scores": [
        {"id": "b", "index": 1, "score": 0.75, "rank": 0}, {"id": "a", "index": 0, "score": 0.5, "rank": 1}]}
    extract = ExtractResult("g", [ExtractedItem("0", [Entity("Paris", "city", 0.9, 0, 5)])], tokens=3)
    answer, _ = codec.task_answer(extract, codec.MSGPACK)
    assert answer["items"] == [{"id": "0", "entities": [
        {"text": "Paris", "label": "city", "score": 0.9, "start": 0, "end": 5}]}]
    assert msgpack.unpackb(msgpack.packb(answer)) == answer


@pytest.mark.parametrize("headers,expected", [
    ({}, codec.JSON),
    ({"Content-Type": "application/msgpack"}, codec.MSGPACK),
    ({"Content-Type": "application/msgpack", "Accept": "application/json"}, codec.JSON),
    ({"Content-Type": "application/msgpack", "Accept": "*/*"}, codec.MSGPACK),
    ({"Content-Type": "application/json", "Accept": "application/msgpack"}, codec.MSGPACK),
    ({"Accept": "application/x-msgpack"}, codec.MSGPACK),
])
def test_answer_format_negotiation(headers, expected):
    assert codec.answer_format(make_mocked_request("POST", "/v1/encode/m", headers=headers)) == expected


def test_api_keys_flag_env_and_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SIE_API_KEYS", " a , b,,")
    assert keys_from_env() == ("a", "b")
    key_file = tmp_path / "keys"
    key_file.write_text("# comment\nfile-1  # trailing comment\n\n")
    keys = ApiKeys(("flag",), key_file)
    assert keys.enabled
    assert keys.check("Bearer flag") and keys.check("bearer file-1") and keys.check("Bearer  file-1 ")
    assert not keys.check("Bearer nope") and not keys.check("Basic flag") and not keys.check(None)
    assert not keys.check("Bearer ") and not keys.check("Bearer comment")
    key_file.write_text("file-2\n")
    keys.refresh()
    assert keys.check("Bearer file-2") and not keys.check("Bearer file-1")
    key_file.unlink()
    keys.refresh()  # a vanished file keeps the last good keys
    assert keys.check("Bearer file-2")
    assert not ApiKeys().enabled


def test_error_codes_match_the_contract_table():
    table = API_MD.read_text().split("## Errors", 1)[1].split("## Routes", 1)[0]
    documented = {}
    for status, codes in re.findall(r"^\| (\d{3}) \| (.+?) \|", table, flags=re.M):
        for code in re.findall(r"`(\w+)`", codes):
            documented[code] = int(status)
    assert documented == STATUS_BY_CODE


def test_metric_names_match_the_contract_table():
    table = API_MD.read_text().split("Engine server (`sie-server serve`)", 1)[1].split("Router (", 1)[0]
    documented = {name: kind for name, kind in re.findall(r"^\| `(sie_\w+)` \| (\w+) \|", table, flags=re.M)}
    metrics = ServerMetrics()
    served = {}
    for attribute in vars(metrics).values():
        describe = getattr(attribute, "describe", None)
        if describe and getattr(attribute, "_name", "").startswith("sie_"):
            family = describe()[0]
            name = family.name + ("_total" if family.type == "counter" else "")
            served[name] = family.type
    assert served == documented


async def test_large_answers_are_serialised_off_the_loop_identically():
    for fmt in (codec.JSON, codec.MSGPACK):
        vectors = [np.full(384, i / 7, dtype=np.float32) for i in range(8)]
        result = EncodeResult("m", [EncodedItem(str(i), dense=v) for i, v in enumerate(vectors)], tokens=8)
        payload, _ = codec.task_answer(result, fmt)
        offloaded = await codec.serialise(payload, fmt, approx_bytes=10, offload_bytes=1)
        assert offloaded == await codec.serialise(payload, fmt, approx_bytes=10, offload_bytes=100)


def test_cli_lists_models_and_refuses_bad_arguments(capsys, tmp_path):
    import json

    from sie_server.cli import main
    from tiny_models import MINILM_DIR

    assert main(["models", "--json", "--model", f"local/minilm={MINILM_DIR}"]) == 0
    listed = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert listed["sentence-transformers/all-MiniLM-L6-v2"]["dims"] == 384
    assert listed["local/minilm"]["outputs"] == ["dense"] and listed["local/minilm"]["weights"].startswith("path ")
    assert main(["serve", "--preload", "no/such-model"]) == 2
    assert "not in the catalog" in capsys.readouterr().err
    assert main(["serve", "--models", str(tmp_path / "missing")]) == 2
    with pytest.raises(SystemExit):
        main(["serve", "--model", "no-equals-sign"])
