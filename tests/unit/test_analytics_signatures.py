"""The error-signature normalizer: what it keeps, what it normalizes away,
and that Spark's regexp_replace twin gives exactly the Python result."""

from __future__ import annotations

import pytest

from audit.analytics.signatures import MAX_SIGNATURE_CHARS, normalize_message, signature

CASES = [
    ("card 4242 declined", "card <n> declined"),
    ("job 3f2a9c1e0b7d4e21 failed after 3 attempts", "job <id> failed after <n> attempts"),
    ("uuid 123e4567-E89B-12d3-a456-426614174000 missing", "uuid <uuid> missing"),
    ("KeyError: 'user_id'", "KeyError: <str>"),
    ('no such key "a b c"', "no such key <str>"),
    ("column `amount` is null", "column <str> is null"),
    ("can't reach db", "can't reach db"),
    ("couldn't parse 'x' for user's row", "couldn't parse <str> for user's row"),
    ("connect to 10.0.0.12:5432 timed out after 12.5s", "connect to <n> timed out after <n>s"),
    ("total 1,250.75 over limit -3", "total <n> over limit -<n>"),
    ("address 0x7ffe12ab not mapped", "address <hex> not mapped"),
    ("token aB3dE5fG7hJ9kL1mN2 rejected", "token <id> rejected"),
    ("object deadbeefcafe42 gone", "object <id> gone"),
    ("processing_handler_v2 crashed", "processing_handler_v<n> crashed"),
    (
        "worker host-12ab34cd-99 lost its lease during attempt 3",
        "worker host-<id>-<n> lost its lease during attempt <n>",
    ),
    ("line one\n\tline   two  ", "line one line two"),
    ("  padded  ", "padded"),
    ("", ""),
    ("ÄÖÜ naïve 42", "ÄÖÜ naïve <n>"),
    ("facade decade", "facade decade"),  # hex-looking words without digits stay
]


@pytest.mark.parametrize(("message", "expected"), CASES)
def test_normalize_message(message: str, expected: str) -> None:
    assert normalize_message(message) == expected


def test_same_bug_same_signature() -> None:
    a = signature("CardDeclined", "card 4242 declined for invoice 'inv-17' (job 9f8e7d6c5b4a3f21)")
    b = signature("CardDeclined", "card 1111 declined for invoice 'inv-99' (job 0123456789abcdef)")
    assert a == b == "CardDeclined: card <n> declined for invoice <str> (job <id>)"


OWN_ID_CASES = [
    # (message, job id, expected): a random base62 id need not contain a digit
    (
        "gateway 10.0.0.2 refused job NqdNuwpWGpLBVVeZ",
        "NqdNuwpWGpLBVVeZ",
        "gateway <n> refused job <id>",
    ),
    (
        "gateway 10.0.0.3 refused job xBvFROQei6SNwKTT",
        "xBvFROQei6SNwKTT",
        "gateway <n> refused job <id>",
    ),
    ("job NqdNuwpWGpLBVVeZ twice: NqdNuwpWGpLBVVeZ", "NqdNuwpWGpLBVVeZ", "job <id> twice: <id>"),
    ("bad key 'cron:nightly:1700000000000'", "cron:nightly:1700000000000", "bad key <str>"),
    ("error 1001 in step 1", "1", "error <n> in step <n>"),  # a short id is left to the rules
    ("another job NqdNuwpWGpLBVVeZ", "someOtherJobId42", "another job NqdNuwpWGpLBVVeZ"),
    ("no id given", None, "no id given"),
]


@pytest.mark.parametrize(("message", "job_id", "expected"), OWN_ID_CASES)
def test_the_jobs_own_id_is_normalized_whatever_it_looks_like(
    message: str, job_id: str | None, expected: str
) -> None:
    assert normalize_message(message, job_id) == expected


def test_type_only_and_unknown_type() -> None:
    assert signature("ValueError", "") == "ValueError"
    assert signature("ValueError", None) == "ValueError"
    assert signature(None, "boom 3") == "Error: boom <n>"
    assert signature("", "boom") == "Error: boom"


def test_long_messages_are_capped() -> None:
    assert len(normalize_message("word " * 200)) == MAX_SIGNATURE_CHARS


@pytest.mark.spark
def test_spark_twin_agrees_with_python() -> None:
    from pyspark.sql import functions as F

    from audit.analytics.metrics import signature_column
    from tests.analytics_helpers import spark_session

    spark = spark_session()
    rows = (
        [("E", m, None) for m, _ in CASES]
        + [("E", m, j) for m, j, _ in OWN_ID_CASES]
        + [
            (None, "x 1", None),
            ("", "y", None),
            ("T", None, "NqdNuwpWGpLBVVeZ"),
            ("T", "word " * 200, None),
            ("T", "  ' quoted start", None),
            ("T", "\u00a0nbsp 7\u00a0", None),
        ]
    )
    frame = spark.createDataFrame(rows, "t string, m string, j string")
    got = [
        r[0] for r in frame.select(signature_column(F.col("t"), F.col("m"), F.col("j"))).collect()
    ]
    assert got == [signature(t, m, j) for t, m, j in rows]
