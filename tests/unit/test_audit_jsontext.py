"""audit/jsontext.py: the engine's JSON text reaches the audit's documents as written
(numbers never through a double), and only what jsonb refuses is replaced."""

from __future__ import annotations

import json

from audit.jsontext import JsonText, dump_json, json_text, storable_json
from audit.relay.fold import fold_new
from scheduler.core.outbox import decode_entry
from scheduler.core.timeutil import ms_to_utc

T0 = 1_800_000_000_000
BIG = (
    '{"v":18446744073709551617,"w":-1180591620717411303424,'
    '"x":[1606938044258990275541962092341162602522202993782792835301377],"f":0.1}'
)


def test_big_integers_are_embedded_as_written() -> None:
    doc = dump_json([{"payload": json_text(BIG), "n": 1}])
    assert doc == '[{"payload":' + BIG + ',"n":1}]'
    assert json.loads(doc)[0]["payload"]["v"] == 2**64 + 1


def test_a_fold_keeps_payload_metadata_and_error_texts() -> None:
    error = '{"type":"E","message":"m","traceback":"","n":36893488147419103233}'
    events = [
        decode_entry(
            f"{T0}-0",
            {
                "e": "scheduled",
                "id": "j",
                "ts": str(T0),
                "a": "0",
                "topic": "t",
                "payload": BIG,
                "metadata": '{"m":-1180591620717411303424}',
            },
        ),
        decode_entry(
            f"{T0 + 1}-0",
            {
                "e": "attempt_failed",
                "id": "j",
                "ts": str(T0 + 1),
                "a": "1",
                "worker": "w",
                "outcome": "failed",
                "error": error,
                "duration_ms": "1",
            },
        ),
    ]
    fold = fold_new("j", ms_to_utc(T0), events)
    assert fold.job["payload"] == JsonText(BIG) and fold.job["last_error"] == JsonText(error)
    written = json.loads(dump_json(fold.job))
    assert written["payload"]["w"] == -(2**70) and written["metadata"] == {"m": -(2**70)}
    assert written["last_error"]["n"] == 2**65 + 1
    out = fold.result().job
    assert out.payload == json.loads(BIG) and out.metadata == {"m": -(2**70)}
    assert out.last_error is not None and out.last_error["n"] == 2**65 + 1


def test_only_escapes_jsonb_refuses_are_replaced() -> None:
    # \\u0000 after an escaped backslash is text; a pair is kept; lone halves and NUL are not
    text = r'["\\u0000","\ud83d\ude00","\ud83d","\ude00x","a\u0000b","\ud800\ud800\udc00"]'
    fixed = storable_json(text)
    assert json.loads(fixed) == [
        "\\u0000",
        "\U0001f600",
        "\ufffd",
        "\ufffdx",
        "a\ufffdb",
        "\ufffd\U00010000",
    ]
    assert storable_json('{"a":"\\u00e9"}') == '{"a":"\\u00e9"}'


def test_text_that_is_not_json_is_kept_as_a_string() -> None:
    assert json_text("NaN").value() == "NaN"
    assert json_text('{"a": 1').value() == '{"a": 1'
    assert json_text("[1, 2]").is_object() is False and json_text(' {"a":1}').is_object()


def test_numbers_beyond_a_double_are_json_too() -> None:
    # orjson refuses them; jsonb stores them exactly
    assert json_text("[1" + "0" * 400 + "]").value() == [10**400]
    assert json_text('{"f":1e400}').text == '{"f":1e400}'
    assert json_text("[Infinity]").value() == "[Infinity]"  # not JSON: jsonb would refuse it


def test_raw_nul_and_lone_surrogates_are_cleaned_too() -> None:
    assert json_text('"a\ud800b"').value() == "a\ufffdb"
    assert json_text('"x\x00y"').value() == "x\ufffdy"  # a raw NUL: cleaned, then JSON
