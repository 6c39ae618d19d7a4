"""Named SQL queries: `audit/queries.sql` split at its `-- name: xxx` markers,
so SQL stays in one reviewable file and Python refers to statements by name."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

_MARKER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> Mapping[str, str]:
    """Split a queries file into {name: sql}.

    Raises:
        ValueError: when a name is repeated or a query is empty.
    """
    found: dict[str, str] = {}
    marks = list(_MARKER.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[mark.end() : end].strip()
        name = mark.group(1)
        if name in found:
            raise ValueError(f"query {name!r} is defined twice")
        if not body or all(line.lstrip().startswith("--") for line in body.splitlines()):
            raise ValueError(f"query {name!r} is empty")
        found[name] = body
    return MappingProxyType(found)


@functools.cache
def queries() -> Mapping[str, str]:
    """All named queries of the package (read once, on first use)."""
    return parse_queries(
        resources.files("audit").joinpath("queries.sql").read_text(encoding="utf-8")
    )


def query(name: str) -> str:
    """The SQL of one named query.

    Raises:
        KeyError: for an unknown name (a typo should fail loudly, at first use).
    """
    return queries()[name]
