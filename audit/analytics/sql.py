"""The named queries of `sql/queries.sql` (the output tables are audit migration 0003)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources

from audit.sql import parse_queries


def _read(name: str) -> str:
    return resources.files("audit.analytics").joinpath("sql", name).read_text(encoding="utf-8")


@functools.cache
def _queries() -> Mapping[str, str]:
    return parse_queries(_read("queries.sql"))


def query(name: str) -> str:
    """One named query of sql/queries.sql.

    Raises:
        KeyError: for an unknown name.
    """
    return _queries()[name]
