"""EXPLAIN (ANALYZE, BUFFERS) of the audit queries the console's pages run, on the bench's
data: each as the custom plan (the parameters' values known) and as the generic plan
(what a prepared statement, as asyncpg uses, may switch to after five runs), with the
scans each plan uses and any sequential scan over a big table flagged."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from audit.sql import query

BIG_TABLE_ROWS = 10_000  # a sequential scan over more rows than this is a finding


@dataclass(frozen=True)
class Case:
    """One query as a page runs it: the name in audit/queries.sql and its arguments."""

    label: str
    name: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Plan:
    label: str
    mode: str  # custom | generic
    ms: float
    scans: list[str]
    big_seq_scans: list[str]
    text: str


def _literal(value: Any, kind: str) -> str:
    """An argument as SQL text (standard_conforming_strings: only quotes are doubled)."""
    if value is None:
        return f"NULL::{kind}"
    return "'" + str(value).replace("'", "''") + f"'::{kind}"


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for child in node.get("Plans", []):
        out += _nodes(child)
    return out


def _scan(n: dict[str, Any]) -> str | None:
    kind = n["Node Type"]
    if "Scan" not in kind or kind in ("Function Scan", "CTE Scan", "Subquery Scan", "Values Scan"):
        return None
    where = n.get("Relation Name", "?")
    using = f" using {n['Index Name']}" if "Index Name" in n else ""
    return f"{kind}{using} on {where} (rows {n.get('Actual Rows', 0)} x{n.get('Actual Loops', 1)})"


async def explain(conn: asyncpg.Connection, case: Case, mode: str) -> Plan:
    """The case's plan in `mode` (custom or generic), run for real (ANALYZE)."""
    sql = query(case.name)
    kinds = [
        t.name if t.schema == "pg_catalog" else f"{t.schema}.{t.name}"
        for t in (await conn.prepare(sql)).get_parameters()
    ]
    statement = f"bench_{case.name}"
    await conn.execute(f"SET plan_cache_mode = force_{mode}_plan")
    await conn.execute(f"PREPARE {statement}({', '.join(kinds)}) AS {sql}")
    args = ", ".join(_literal(v, k) for v, k in zip(case.args, kinds))
    run = f"EXECUTE {statement}({args})"
    raw = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {run}")
    doc = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    text = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {run}"))
    await conn.execute(f"DEALLOCATE {statement}; RESET plan_cache_mode")
    nodes = _nodes(doc["Plan"])
    scans = [s for s in (_scan(n) for n in nodes) if s]
    big = []
    for n in nodes:
        if n["Node Type"] == "Seq Scan":
            rows = await conn.fetchval(
                "SELECT reltuples::bigint FROM pg_class WHERE relname = $1", n["Relation Name"]
            )
            if rows is not None and rows > BIG_TABLE_ROWS:
                big.append(f"{n['Relation Name']} ({rows:,} rows)")
    return Plan(case.label, mode, round(doc["Execution Time"], 2), scans, big, text)


async def explain_all(url: str, cases: list[Case]) -> list[Plan]:
    """Every case as its custom and its generic plan (one connection, json as text)."""
    conn = await asyncpg.connect(url)
    try:
        out = []
        for case in cases:
            for mode in ("custom", "generic"):
                out.append(await explain(conn, case, mode))
        return out
    finally:
        await conn.close()


def summary_lines(plans: list[Plan]) -> list[str]:
    """One line per plan: the query, the mode, its time and its scans (deduplicated)."""
    lines = []
    for p in plans:
        seen: dict[str, int] = {}
        for s in p.scans:
            base = s.split(" (rows")[0]
            seen[base] = seen.get(base, 0) + 1
        scans = "; ".join(
            f"{k}" + (f" [x{v} partitions]" if v > 1 else "") for k, v in seen.items()
        )
        flag = f"  SEQ SCAN OVER BIG TABLE: {', '.join(p.big_seq_scans)}" if p.big_seq_scans else ""
        lines.append(f"{p.label:<28} {p.mode:<8} {p.ms:>9.2f} ms  {scans}{flag}")
    return lines


async def plan_cache(url: str, cases: list[Case], runs: int = 12) -> dict[str, str]:
    """Run each case `runs` times as asyncpg does (a prepared statement, the default
    plan_cache_mode), then ask pg_prepared_statements how many custom and generic plans
    PostgreSQL made: past the fifth run it switches to the generic plan when that one does
    not look dearer than the custom ones did."""
    conn = await asyncpg.connect(url)
    try:
        for case in cases:
            for _ in range(runs):
                await conn.fetch(query(case.name), *case.args)
        rows = await conn.fetch(
            "SELECT statement, custom_plans, generic_plans FROM pg_prepared_statements"
        )
    finally:
        await conn.close()
    out = {}
    for case in cases:
        sql = query(case.name)
        found = next((r for r in rows if r["statement"] == sql), None)
        out[case.label] = f"{found['custom_plans']}/{found['generic_plans']}" if found else "?"
    return out
