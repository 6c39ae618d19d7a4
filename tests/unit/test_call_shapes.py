"""No call in the product passes more than 5 positional arguments: past that, a reader (and
a reviewer of a reordering) cannot tell which value is which; use keywords or an object
(a request travels as a `JobRequest`, not as a dozen positional values).

Exempt are variadic APIs whose arguments are a list of like items, not fields: a Redis
command's words (`.call`), SQL parameters (`.execute`, `.fetch*`) and a log call's format
values. A `*sequence` spread counts as no positional argument: the sequence names them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("horae", "scheduler", "listeners", "audit", "console")
MAX_POSITIONAL = 5
VARIADIC = frozenset(
    {"call", "_call", "execute", "executemany", "fetch", "fetchrow", "fetchval"}
    | {"debug", "info", "warning", "error", "exception", "critical", "log"}
)


def long_calls(source: str, filename: str) -> list[str]:
    """`filename:line callee (n positional)` for each call of `source` over the limit."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        n = sum(1 for arg in node.args if not isinstance(arg, ast.Starred))
        if n <= MAX_POSITIONAL:
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in VARIADIC:
            continue
        found.append(f"{filename}:{node.lineno} {ast.unparse(node.func)} ({n} positional)")
    return found


def product_long_calls() -> list[str]:
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            found += long_calls(path.read_text(encoding="utf-8"), name)
    return found


def test_no_product_call_passes_more_than_five_positional_arguments() -> None:
    found = product_long_calls()
    assert not found, "calls with more than 5 positional arguments:\n" + "\n".join(found)


def test_the_check_finds_a_long_call_and_spares_keywords_spreads_and_variadic_apis() -> None:
    source = (
        "build_job(topic, now, 'UTC', payload, None, metadata, None)\n"
        "build_job(topic, now, 'UTC', payload, None, metadata=metadata, timeout=None)\n"
        "table.add_row(*cells)\n"
        "wire.call('ZRANGE', key, 0, -1, 'WITHSCORES', 'REV')\n"
        "log.warning('%s %s %s %s %s', a, b, c, d, e)\n"
        "obj.method(a, b, c, d, e, f)\n"
    )
    assert long_calls(source, "m.py") == [
        "m.py:1 build_job (7 positional)",
        "m.py:6 obj.method (6 positional)",
    ]
