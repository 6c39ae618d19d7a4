"""The audit's SQL names statuses, outcomes and event types only as scheduler/core/outbox.py
declares them (SQL cannot import Python): every literal compared with a status, outcome or
event_type column in audit/queries.sql and audit/analytics/sql/*.sql is a declared one, and the
migrations' latest CHECK of each column allows exactly the declared set (a rename or a new
outcome needs a new migration: applied ones are never edited). Each check is run on a planted
literal too, so it can fail."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from scheduler.core.outbox import (
    ACTIVE,
    EVENT_TYPES,
    FAILED_OUTCOMES,
    JOB_OUTCOMES,
    SUCCESS_OUTCOMES,
    TERMINAL_STATUSES,
    Outcome,
    Status,
)

ROOT = Path(__file__).resolve().parents[2]
DECLARED = {
    "status": {ACTIVE, *TERMINAL_STATUSES},
    "outcome": {*SUCCESS_OUTCOMES, *FAILED_OUTCOMES, *JOB_OUTCOMES},
    "event_type": set(EVENT_TYPES),
}
QUERIES = [ROOT / "audit" / "queries.sql", *sorted((ROOT / "audit/analytics/sql").glob("*.sql"))]
MIGRATIONS = sorted((ROOT / "audit" / "migrations").glob("*.sql"))

_COLUMN = r"\b(?:\w+\.)?(status|outcome|event_type)"
_COMPARED = re.compile(_COLUMN + r"\s*(?:=|<>|!=)\s*'([^']*)'", re.I)
_IN_LIST = re.compile(_COLUMN + r"\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", re.I)
_CASE = re.compile(r"\bCASE\s+" + _COLUMN + r"\s+(.*?)\b(?:ELSE|END)\b", re.I | re.S)
_WHEN = re.compile(r"\bWHEN\s+'([^']*)'", re.I)
_CHECK = re.compile(r"\bCHECK\s*\(\s*" + _COLUMN + r"\s+IN\s*\(([^)]*)\)\s*\)", re.I)
_LITERAL = re.compile(r"'([^']*)'")


def code(sql: str) -> str:
    """`sql` without its comments."""
    return re.sub(r"--[^\n]*", "", sql)


def literals(sql: str) -> list[tuple[str, str]]:
    """(column, literal) for every literal `sql` compares with a status, outcome or event_type."""
    text = code(sql)
    found = [(m.group(1).lower(), m.group(2)) for m in _COMPARED.finditer(text)]
    for m in _IN_LIST.finditer(text):
        found += [(m.group(1).lower(), v) for v in _LITERAL.findall(m.group(2))]
    for m in _CASE.finditer(text):
        found += [(m.group(1).lower(), v) for v in _WHEN.findall(m.group(2))]
    return found


def undeclared(sql: str) -> list[tuple[str, str]]:
    return [(column, v) for column, v in literals(sql) if v not in DECLARED[column]]


def latest_checks() -> dict[str, set[str]]:
    """Each column's allowed values as the last migration that CHECKs it says."""
    checks: dict[str, set[str]] = {}
    for path in MIGRATIONS:
        for m in _CHECK.finditer(code(path.read_text())):
            checks[m.group(1).lower()] = set(_LITERAL.findall(m.group(2)))
    return checks


@pytest.mark.parametrize("path", QUERIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_queries_name_only_declared_values(path: Path) -> None:
    assert undeclared(path.read_text()) == []


def test_the_queries_have_values_to_check() -> None:
    found = [lit for path in QUERIES for lit in literals(path.read_text())]
    assert {column for column, _ in found} >= {"status", "outcome"}
    assert len(found) >= 8


def test_migrations_name_only_declared_values() -> None:
    for path in MIGRATIONS:
        assert undeclared(path.read_text()) == [], path.name


def test_the_latest_checks_allow_exactly_the_declared_values() -> None:
    checks = latest_checks()
    assert checks["status"] == DECLARED["status"]
    assert checks["outcome"] == DECLARED["outcome"]


@pytest.mark.parametrize(
    ("planted", "found"),
    [
        ("SELECT 1 FROM t WHERE a.status = 'finished' -- 'x'", ("status", "finished")),
        ("WHERE outcome IN ('failed', 'crashed')", ("outcome", "crashed")),
        ("SELECT CASE j.status WHEN 'completed' THEN 1 WHEN 'done' THEN 2 END", ("status", "done")),
        ("WHERE e.event_type <> 'attempt_exploded'", ("event_type", "attempt_exploded")),
    ],
)
def test_a_planted_literal_is_found(planted: str, found: tuple[str, str]) -> None:
    assert undeclared(planted) == [found]


def test_a_literal_in_a_comment_is_not_a_value() -> None:
    assert literals("-- WHERE status = 'finished'\nSELECT 1") == []


def test_the_analytics_failed_outcomes_are_the_declared_ones() -> None:
    """The analytics count an attempt as failed by the same outcomes complete/fail do."""
    sql = code((ROOT / "audit/analytics/sql/queries.sql").read_text())
    lists = [set(_LITERAL.findall(m.group(2))) for m in _IN_LIST.finditer(sql)]
    assert set(FAILED_OUTCOMES) in lists


def test_the_literal_types_are_the_declared_values() -> None:
    """outbox.py's Literal types (mypy needs them written out) say what its constants say."""
    # (parent_failed is a job's outcome with no attempt: not an attempt's Outcome)
    assert set(get_args(Outcome)) | set(JOB_OUTCOMES) == DECLARED["outcome"]
    assert set(get_args(Status)) == DECLARED["status"]
