"""Turn a benchmark run into medians, targets and the markdown table of bench/README.md."""

from __future__ import annotations

import statistics
from typing import Any

from common import ALL_SYSTEMS, AUDIT_SYSTEMS, PEERS, README

TABLE_START, TABLE_END = "<!-- bench:table:start -->", "<!-- bench:table:end -->"
PRIORITY_SLACK = (
    2 * 50 * 50
)  # drain_priority: jobs in flight (concurrency 50) at each of the 2 priority boundaries

# (scenario, metric path, label, higher is better; None: no better side, no ratio)
TABLE_METRICS: list[tuple[str, str, str, bool | None]] = [
    (
        "e2e_split",
        "jobs_per_s",
        "e2e_split jobs/s (producer in its own process, one worker process)",
        True,
    ),
    ("e2e_split", "latency.p50_ms", "e2e_split latency p50 ms", False),
    ("e2e_split", "latency.p99_ms", "e2e_split latency p99 ms", False),
    ("enqueue", "jobs_per_s", "enqueue jobs/s (one await at a time)", True),
    ("enqueue_bulk", "jobs_per_s", "enqueue jobs/s (bulk API)", True),
    ("drain", "jobs_per_s", "drain jobs/s (concurrency 50)", True),
    ("drain", "redis_cmds_per_s", "drain Redis commands/s", True),
    ("drain_priority", "jobs_per_s", "drain_priority jobs/s (3 priorities, concurrency 50)", True),
    (
        "drain_priority",
        "order.inversions_pct",
        "drain_priority start-order inversions % of pairs",
        False,
    ),
    ("drain_priority", "order.mean_rank.1", "drain_priority mean start rank ÷ N, high (1)", None),
    ("drain_priority", "order.mean_rank.0", "drain_priority mean start rank ÷ N, normal (0)", None),
    ("drain_priority", "order.mean_rank.-1", "drain_priority mean start rank ÷ N, low (-1)", None),
    ("rate_limited", "rate_per_s", "rate_limited achieved jobs/s (limit 2,000 per 1 s)", None),
    ("rate_limited", "rate_error_pct", "rate_limited error vs 2,000/s %", None),
    ("rate_limited", "max_starts_in_any_window", "rate_limited most starts in any 1 s", None),
    ("e2e", "jobs_per_s", "e2e jobs/s", True),
    ("e2e", "latency.p50_ms", "e2e latency p50 ms", False),
    ("e2e", "latency.p99_ms", "e2e latency p99 ms", False),
    ("e2e_at", "jobs_per_s", "e2e jobs/s, schedule_at(now)", True),
    ("e2e_at", "latency.p99_ms", "e2e latency p99 ms, schedule_at(now)", False),
    ("paced", "latency.p50_ms", "paced 200/s latency p50 ms", False),
    ("paced", "latency.p99_ms", "paced 200/s latency p99 ms", False),
    ("paced_at", "latency.p50_ms", "paced 200/s latency p50 ms, schedule_at(now)", False),
    ("paced_at", "latency.p99_ms", "paced 200/s latency p99 ms, schedule_at(now)", False),
    (
        "paced_split",
        "latency.p50_ms",
        "paced_split 200/s latency p50 ms (producer process, schedule_at(now))",
        False,
    ),
    (
        "paced_split",
        "latency.p99_ms",
        "paced_split 200/s latency p99 ms (producer process, schedule_at(now))",
        False,
    ),
    ("delayed_burst", "lateness.p50_ms", "delayed_burst lateness p50 ms", False),
    ("delayed_burst", "lateness.p99_ms", "delayed_burst lateness p99 ms", False),
    ("delayed_burst", "lateness.max_ms", "delayed_burst lateness max ms", False),
    ("delayed_spread", "lateness.p50_ms", "delayed_spread lateness p50 ms", False),
    ("delayed_spread", "lateness.p99_ms", "delayed_spread lateness p99 ms", False),
    ("delayed_spread", "lateness.max_ms", "delayed_spread lateness max ms", False),
    ("retry", "seconds", "retry total s (fixed 1 s delay)", False),
    ("memory", "bytes_per_job", "memory bytes per delayed job", False),
    ("claim", "redis_cmds_per_s", "claim path alone: Redis commands/s (horae)", True),
]


def get(metrics: dict[str, Any], path: str) -> float | None:
    cur: Any = metrics
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return float(cur) if isinstance(cur, (int, float)) else None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (system, scenario): median / min / max of every numeric metric; statuses."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["system"], r["scenario"]), []).append(r)
    out: dict[str, Any] = {}
    for (system, scenario), rs in groups.items():
        ok = [r for r in rs if r.get("status") == "ok"]
        entry: dict[str, Any] = {
            "reps_ok": len(ok),
            "reps": len(rs),
            "status": "ok" if ok else (rs[0].get("status") or "?"),
        }
        paths = set()
        for r in ok:
            paths |= set(_paths(r.get("metrics", {})))
        for p in sorted(paths):
            vals = [v for r in ok if (v := get(r["metrics"], p)) is not None]
            if vals:
                entry[p] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        if scenario == "retry" and ok:
            entry["exactly_twice_all_reps"] = all(r["metrics"].get("exactly_twice") for r in ok)
        out.setdefault(system, {})[scenario] = entry
    return out


def _paths(d: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _paths(v, f"{prefix}{k}.")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(prefix + k)
    return out


# ----------------------------------------------------------------------------- report
def fmt(v: float | None) -> str:
    if v is None:
        return "–"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def cell(summary: dict[str, Any], system: str, scenario: str, path: str) -> str:
    e = summary.get(system, {}).get(scenario)
    if e is None:
        return "not run"
    if path not in e:
        return e.get("status", "–") if e.get("status") != "ok" else "–"
    m = e[path]
    if m["min"] == m["max"]:
        return fmt(m["median"])
    return f"{fmt(m['median'])} ({fmt(m['min'])}–{fmt(m['max'])})"


def median_of(summary: dict[str, Any], system: str, scenario: str, path: str) -> float | None:
    e = summary.get(system, {}).get(scenario, {})
    return e[path]["median"] if path in e else None


def best_peer(
    summary: dict[str, Any], scenario: str, path: str, higher: bool | None
) -> tuple[str | None, float | None]:
    if higher is None:
        return None, None
    vals = [(p, v) for p in PEERS if (v := median_of(summary, p, scenario, path)) is not None]
    if not vals:
        return None, None
    return (max if higher else min)(vals, key=lambda pv: pv[1])


def versus(peer: str | None, value: float | None, unit: str = "") -> str:
    """The best peer and its value for a target's text ("no peer run" in a run without peers)."""
    return f"{peer} {fmt(value)}{unit}" if peer is not None else "no peer run"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def status(summary: dict[str, Any], system: str, scenario: str) -> str:
    """Why a system has no value for a scenario: its status ("not run" when it was not run)."""
    return str(summary.get(system, {}).get(scenario, {}).get("status", "not run"))


def ratio_systems(systems: list[str]) -> list[str]:
    """The horae variants that get a "÷ best peer" column: those in this run."""
    return [x for x in ("horae", *AUDIT_SYSTEMS) if x in systems]


def targets(summary: dict[str, Any], ceilings: list[dict[str, Any]]) -> list[dict[str, str]]:
    rows = []

    def add(name: str, measured: str, met: bool | None) -> None:
        rows.append(
            {
                "target": name,
                "measured": measured,
                "met": "n/a" if met is None else ("met" if met else "NOT met"),
            }
        )

    for system, what in AUDIT_SYSTEMS.items():  # issue 15: both ways of running the relay
        tag = f" ({what})"
        for sc in ("e2e", "drain"):
            peer, pv = best_peer(summary, sc, "jobs_per_s", True)
            on = median_of(summary, system, sc, "jobs_per_s")
            off = median_of(summary, "horae", sc, "jobs_per_s")
            if on is None:
                add(
                    f"{sc} jobs/s ≥ 1.5× best peer{tag}",
                    f"{status(summary, system, sc)}; audit off {fmt(off)} "
                    f"vs {versus(peer, pv)} = {ratio(off, pv)}",
                    None,
                )
            else:
                add(
                    f"{sc} jobs/s ≥ 1.5× best peer{tag}",
                    f"{fmt(on)} vs {versus(peer, pv)} = {ratio(on, pv)}",
                    None if pv is None else on >= 1.5 * pv,
                )
        peer, pv = best_peer(summary, "e2e_split", "jobs_per_s", True)
        on = median_of(summary, system, "e2e_split", "jobs_per_s")
        add(
            f"e2e_split jobs/s ≥ 3× best peer{tag}",
            f"{fmt(on)} vs {versus(peer, pv)} = {ratio(on, pv)}"
            if on is not None
            else status(summary, system, "e2e_split"),
            None if on is None or pv is None else on >= 3 * pv,
        )
        v = median_of(summary, system, "e2e_split", "latency.p99_ms")
        add(
            f"e2e_split latency p99 ≤ 20 ms{tag}",
            f"{fmt(v)} ms" if v is not None else status(summary, system, "e2e_split"),
            None if v is None else v <= 20,
        )
        for sc in ("e2e_split", "drain"):
            peer, pv = best_peer(summary, sc, "cpu_per_job_us.total_us", False)
            v = median_of(summary, system, sc, "cpu_per_job_us.total_us")
            add(
                f"{sc} CPU per job ≤ best peer's without audit{tag}",
                f"{fmt(v)} µs vs {versus(peer, pv, ' µs')} = {ratio(v, pv)}"
                if v is not None
                else status(summary, system, sc),
                None if v is None or pv is None else v <= pv,
            )
    for system in ("horae", *AUDIT_SYSTEMS):
        tag = f" ({AUDIT_SYSTEMS[system]})" if system in AUDIT_SYSTEMS else ""
        v = median_of(summary, system, "paced_at", "latency.p99_ms")
        add(
            f"paced latency p99 ≤ 2 ms through schedule_at(now){tag}",
            f"{fmt(v)} ms" if v is not None else "not run",
            None if v is None else v <= 2,
        )
        v = median_of(summary, system, "paced_split", "latency.p99_ms")
        add(
            f"paced latency p99 ≤ 2 ms, schedule_at(now) from a producer process{tag}",
            f"{fmt(v)} ms" if v is not None else "not run",
            None if v is None else v <= 2,
        )
        v = median_of(summary, system, "delayed_spread", "lateness.p99_ms")
        add(
            f"delayed_spread lateness p99 ≤ 5 ms{tag}",
            f"{fmt(v)} ms"
            if v is not None
            else summary.get(system, {}).get("delayed_spread", {}).get("status", "not run"),
            None if v is None else v <= 5,
        )
        v = median_of(summary, system, "delayed_burst", "lateness.p99_ms")
        peer, pv = best_peer(summary, "delayed_burst", "lateness.p99_ms", False)
        add(
            f"delayed_burst lateness p99 ≤ 0.5× best peer{tag}",
            f"{fmt(v)} ms vs {versus(peer, pv, ' ms')} = {ratio(v, pv)}"
            if v is not None
            else summary.get(system, {}).get("delayed_burst", {}).get("status", "not run"),
            None if v is None or pv is None else v <= 0.5 * pv,
        )
        v = median_of(summary, system, "paced", "latency.p99_ms")
        add(
            f"paced latency p99 ≤ 2 ms{tag}",
            f"{fmt(v)} ms"
            if v is not None
            else summary.get(system, {}).get("paced", {}).get("status", "not run"),
            None if v is None else v <= 2,
        )
        v = median_of(summary, system, "retry", "seconds")
        peer, pv = best_peer(summary, "retry", "seconds", False)
        twice = summary.get(system, {}).get("retry", {}).get("exactly_twice_all_reps")
        add(
            f"retry total ≤ best peer, each job exactly 2 runs{tag}",
            f"{fmt(v)} s vs {versus(peer, pv, ' s')} = {ratio(v, pv)}; exactly twice: {twice}"
            if v is not None
            else summary.get(system, {}).get("retry", {}).get("status", "not run"),
            None if v is None or pv is None else (v <= pv and bool(twice)),
        )
        v = median_of(summary, system, "memory", "bytes_per_job")
        peer, pv = best_peer(summary, "memory", "bytes_per_job", False)
        add(
            f"memory bytes/delayed job ≤ leanest peer{tag}",
            f"{fmt(v)} B vs {versus(peer, pv, ' B')} = {ratio(v, pv)}"
            if v is not None
            else summary.get(system, {}).get("memory", {}).get("status", "not run"),
            None if v is None or pv is None else v <= pv,
        )
    for system in (
        "horae",
        *AUDIT_SYSTEMS,
        "bullmq",
    ):  # issue 14: flow control (bullmq shown for context)
        tag = (
            ""
            if system == "horae"
            else f" ({AUDIT_SYSTEMS.get(system, system + ', for comparison')})"
        )
        e = summary.get(system, {}).get("drain_priority")
        if e is not None:
            inv = e.get("order.inverted_pairs", {}).get("max")
            ranks = [e.get(f"order.mean_rank.{q}", {}).get("median") for q in (1, 0, -1)]
            ok = inv is not None and None not in ranks
            add(
                f"drain_priority: priority order respected (inverted pairs ≤ 2 × "
                f"50² = {PRIORITY_SLACK:,}, the jobs in flight at the two "
                f"priority boundaries; mean start rank high < normal < low){tag}",
                f"inverted pairs max {fmt(inv)} "
                f"({fmt(e.get('order.inversions_pct', {}).get('max'))}% "
                f"of pairs); mean rank {' / '.join(fmt(r) for r in ranks)}"
                if ok
                else e.get("status", "?"),
                None if not ok else (inv <= PRIORITY_SLACK and ranks[0] < ranks[1] < ranks[2]),
            )
        e = summary.get(system, {}).get("rate_limited")
        if e is not None:
            rate = e.get("rate_per_s", {}).get("median")
            err = e.get("rate_error_pct", {})
            add(
                f"rate_limited: achieved rate within ±5% of 2,000/s{tag}",
                f"{fmt(rate)} jobs/s, error {err['median']:+.2f}% "
                f"(reps {err['min']:+.2f}%..{err['max']:+.2f}%)"
                if rate is not None
                else e.get("status", "?"),
                None if rate is None else max(abs(err["min"]), abs(err["max"])) <= 5,
            )
    rows_34 = cost_targets(summary)
    for row in rows_34:
        add(*row)
    # The ceiling is redis-benchmark's EVALSHA rate (a bare `return 1`: one
    # Redis command per call). A script making 10 calls, counted as 11 commands, is a
    # stricter reference (cheap HINCRBYs inside one call), shown beside it.
    plain = next(
        (c.get("redis_cmds_per_s") for c in ceilings if c.get("inner_commands") == 0), None
    )
    inner = next((c.get("redis_cmds_per_s") for c in ceilings if c.get("inner_commands")), None)
    checks = (
        ("claim", "claim.lua alone", plain, "EVALSHA ceiling", True),
        ("claim", "claim.lua alone", inner, "10-call script ceiling (stricter reference)", True),
        (
            "drain",
            "whole drain, claim + settle + handlers (context only)",
            plain,
            "EVALSHA ceiling",
            False,
        ),
    )
    for sc, label, ceiling, name, judged in checks:
        v = median_of(summary, "horae", sc, "redis_cmds_per_s")
        busy = median_of(summary, "horae", sc, "redis_busy")
        busy_note = f" (Redis's thread busy {busy:.0%} of the time)" if busy is not None else ""
        add(
            f"claim path ≥ 50% of {name} (Redis commands/s): {label}",
            f"{fmt(v)} cmds/s vs {fmt(ceiling)} = {ratio(v, ceiling)}{busy_note}"
            if v is not None
            else "not run",
            None if v is None or ceiling is None or not judged else v >= 0.5 * ceiling,
        )
    return rows


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    systems = [x for x in ALL_SYSTEMS if x in s]
    m = report["machine"]
    lines = [
        f"Run {report['date']} · {m['cores']} cores ({m['cpu']}) · Python {m['python']} · "
        f"Redis {report['redis']['version']} ({report['redis']['binary']}, persistence off) · "
        f"scale {report['scale']} · {report['reps']} reps · "
        f"horae at {report.get('horae_revision_at_start', '?')}"
        + (
            f" → {report['horae_revision_at_end']} (the engine changed during the run)"
            if report.get("horae_revision_at_end", report.get("horae_revision_at_start"))
            != report.get("horae_revision_at_start")
            else ""
        )
        + f" · `{report['command']}`",
        "",
        "Versions: "
        + "; ".join(
            f"{k}: " + ", ".join(f"{a} {b}" for a, b in v.items())
            for k, v in report["versions"].items()
        )
        + ".",
        "",
        "Cells: median (min–max) over the repetitions; ratio = a horae "
        "variant's median ÷ best peer median (for jobs/s higher is better, "
        "for everything else lower is better). horae+audit runs the default "
        "settings (the worker's relay in a child process of its own, `[audit] "
        "relay_process`), horae+audit-proc a `horae audit relay` process beside workers "
        "that relay nothing.",
        "",
        "| metric | N | "
        + " | ".join(systems)
        + " | best peer | "
        + " | ".join(f"{x} ÷ best" for x in ratio_systems(systems))
        + " |",
        "|---|---|" + "---|" * (len(systems) + 1 + len(ratio_systems(systems))),
    ]
    for sc, path, label, higher in TABLE_METRICS:
        if not any(sc in s.get(x, {}) for x in systems):
            continue
        peer, pv = best_peer(s, sc, path, higher)
        n = report["n"].get(sc, "")
        row = [label, f"{n:,}" if isinstance(n, int) else str(n)] + [
            cell(s, x, sc, path) for x in systems
        ]
        row += [versus(peer, pv) if peer else "–"]
        row += [ratio(median_of(s, x, sc, path), pv) for x in ratio_systems(systems)]
        lines.append("| " + " | ".join(row) + " |")
    lines += cpu_table(report, systems)
    twice = {
        x: s.get(x, {}).get("retry", {}).get("exactly_twice_all_reps")
        for x in systems
        if "retry" in s.get(x, {})
    }
    if twice:
        lines += [
            "",
            "retry: every job ran exactly twice in every rep: "
            + ", ".join(f"{k} {v}" for k, v in twice.items())
            + ".",
        ]
    if report["ceilings"]:
        lines += [
            "",
            "redis-benchmark ceilings (-c 50 -P 16, same server): "
            + "; ".join(
                f"{c['label']}: {fmt(c.get('calls_per_s'))} calls/s = "
                f"{fmt(c.get('redis_cmds_per_s'))} Redis commands/s"
                for c in report["ceilings"]
                if c.get("calls_per_s")
            )
            + ".",
        ]
    foreign = [r["cpu"]["foreign_cores"] for r in report["runs"] if r.get("cpu")]
    if foreign:
        lines += [
            "",
            f"CPU used by processes other than the benchmark's own (other sessions' tests etc.) "
            f"during the runs: median {statistics.median(foreign):.2f} cores, max "
            f"{max(foreign):.2f} of {m['cores']} (per run in the JSON, `cpu.foreign_cores`).",
        ]
    lines += ["", "| target | measured | |", "|---|---|---|"]
    for t in report["targets"]:
        if t["met"] == "n/a" and "not run" in t["measured"]:
            continue  # a run of a few scenarios (--readme-part): only the checks it measured
        lines.append(f"| {t['target']} | {t['measured']} | {t['met']} |")
    return "\n".join(lines)


CPU_SPLIT = ("client_us", "redis_us", "postgres_us")


def cpu_cell(summary: dict[str, Any], system: str, scenario: str) -> str:
    """Total µs per job, then client / Redis / PostgreSQL (medians of each)."""
    total = median_of(summary, system, scenario, "cpu_per_job_us.total_us")
    if total is None:
        return "–"
    parts = [median_of(summary, system, scenario, f"cpu_per_job_us.{k}") for k in CPU_SPLIT]
    return f"{fmt(total)} ({' / '.join(fmt(p) for p in parts)})"


def cost_targets(summary: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Issue 34: what a job costs the shared servers and every process, audit on, default
    settings (horae+audit)."""
    out: list[tuple[str, str, bool | None]] = []
    system = "horae+audit"

    def us(sc: str, part: str) -> float | None:
        return median_of(summary, system, sc, f"cpu_per_job_us.{part}")

    def judge(name: str, value: float | None, limit: float, scenario: str) -> None:
        out.append(
            (
                name,
                f"{fmt(value)} µs" if value is not None else status(summary, system, scenario),
                None if value is None else value <= limit,
            )
        )

    for sc in ("drain", "e2e_split"):
        judge(f"{sc}: PostgreSQL CPU per audited job ≤ 30 µs", us(sc, "postgres_us"), 30, sc)
        judge(f"{sc}: the relay's own CPU per job ≤ 40 µs", us(sc, "helpers_us"), 40, sc)
    judge("drain: Redis CPU per job ≤ 40 µs (audit on)", us("drain", "redis_us"), 40, "drain")
    for sc in ("e2e_split", "e2e"):
        judge(f"{sc}: Redis CPU per job ≤ 60 µs (audit on)", us(sc, "redis_us"), 60, sc)
    for sc in ("drain", "e2e_split", "e2e"):
        peer, pv = best_peer(summary, sc, "cpu_per_job_us.total_us", False)
        v = us(sc, "total_us")
        out.append(
            (
                f"{sc}: total CPU per job ≤ 0.4× best peer's (audit on)",
                f"{fmt(v)} µs vs {versus(peer, pv, ' µs')} = {ratio(v, pv)}"
                if v is not None
                else status(summary, system, sc),
                None if v is None or pv is None else v <= 0.4 * pv,
            )
        )
    peer, pv = best_peer(summary, "e2e", "jobs_per_s", True)
    v = median_of(summary, system, "e2e", "jobs_per_s")
    out.append(
        (
            "e2e jobs/s ≥ 2× best peer (audit on, one process)",
            f"{fmt(v)} vs {versus(peer, pv)} = {ratio(v, pv)}"
            if v is not None
            else status(summary, system, "e2e"),
            None if v is None or pv is None else v >= 2 * pv,
        )
    )
    return out


def cpu_table(report: dict[str, Any], systems: list[str]) -> list[str]:
    """CPU µs per job of every process involved (client processes + redis-server + PostgreSQL
    for horae's audit), per scenario and system: steadier than wall time on a shared machine."""
    s, path = report["summary"], "cpu_per_job_us.total_us"
    scenarios = [
        sc for sc in report["n"] if any(median_of(s, x, sc, path) is not None for x in systems)
    ]
    if not scenarios:
        return []
    lines = [
        "",
        "CPU per job, µs: total (client / Redis / PostgreSQL). All processes in the measured "
        "window: client processes (a relay process of horae's included; its share alone as "
        "helpers_us in the JSON), redis-server and, with the audit on, PostgreSQL; medians "
        "over the reps:",
        "",
        "| scenario | "
        + " | ".join(systems)
        + " | best peer | "
        + " | ".join(f"{x} ÷ best" for x in ratio_systems(systems))
        + " |",
        "|---|" + "---|" * (len(systems) + 1 + len(ratio_systems(systems))),
    ]
    for sc in scenarios:
        peer, pv = best_peer(s, sc, path, False)
        row = [sc] + [cpu_cell(s, x, sc) for x in systems]
        row += [versus(peer, pv) if peer else "–"]
        row += [ratio(median_of(s, x, sc, path), pv) for x in ratio_systems(systems)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def write_readme(md: str, part: str | None = None) -> None:
    """Rewrite the table between the markers; with `part`, only a block of that name at its end
    (added or replaced; a full rewrite drops it, since the table is then what that run measured)."""
    text = README.read_text() if README.exists() else f"# bench\n\n{TABLE_START}\n{TABLE_END}\n"
    if TABLE_START not in text:
        text += f"\n{TABLE_START}\n{TABLE_END}\n"
    head, _, rest = text.partition(TABLE_START)
    table, _, tail = rest.partition(TABLE_END)
    if part is None:
        table = f"\n{md}\n"
    else:
        start, end = f"<!-- bench:part:{part}:start -->", f"<!-- bench:part:{part}:end -->"
        before, found, after = table.partition(start)
        if found:
            table = before + after.partition(end)[2]
        table = f"{table.rstrip()}\n\n{start}\n{md}\n{end}\n"
    README.write_text(f"{head}{TABLE_START}{table}{TABLE_END}{tail}")
