"""Named queries and migration files: every name the code uses exists, the
files follow the naming rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from audit.migrate import add_months, load_migrations
from audit.sql import parse_queries, queries

AUDIT = Path(__file__).resolve().parents[2] / "audit"
# audit/ and its sub-packages, not the analytics (their queries are files of their own)
AUDIT_CODE = [p for p in AUDIT.rglob("*.py") if "analytics" not in p.relative_to(AUDIT).parts]


def test_every_query_the_code_names_exists_and_every_query_is_used() -> None:
    used = set()
    for source in AUDIT_CODE:
        used |= set(re.findall(r'query\("([a-z_]+)"\)', source.read_text()))
    assert used <= set(queries()), used - set(queries())
    assert set(queries()) - used == set()


def test_queries_use_bound_parameters_only() -> None:
    for name, sql in queries().items():
        assert not re.search(r"\{[a-z_]*\}|%s|%\(", sql), name
    for source in AUDIT_CODE:  # and no SQL built in Python
        assert not re.search(r"(execute|fetch\w*)\(f[\"']", source.read_text()), source.name


def test_parse_rejects_duplicates_and_empty_queries() -> None:
    assert dict(parse_queries("-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;")) == {
        "a": "SELECT 1;",
        "b": "SELECT 2;",
    }
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- name: a\n-- only a comment\n")


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [m.version for m in load_migrations()]
    assert versions == list(range(1, len(versions) + 1))
    for path in (AUDIT / "migrations").iterdir():
        if (
            path.name != "SHA256SUMS"
        ):  # the append-only guard (test_audit_migrations_append_only.py)
            assert re.fullmatch(r"\d{4}_[a-z0-9_]+\.sql", path.name), path.name


def test_month_arithmetic() -> None:
    from datetime import date

    assert add_months(date(2026, 11, 1), 2) == date(2027, 1, 1)
    assert add_months(date(2026, 1, 1), -1) == date(2025, 12, 1)
