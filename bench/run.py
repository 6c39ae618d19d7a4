"""Benchmark horae against its peers on one private Redis, side by side.

    python bench/run.py [--scale 1.0] [--reps 3] [--systems ...] [--scenarios ...]

Starts a private redis-server (free loopback port, persistence off), runs every
(system, scenario, repetition) in a fresh process (bench/driver.py under the
system's own venv), measures the redis-benchmark EVALSHA ceilings, writes
bench/results/bench-<stamp>.json and the table in bench/README.md.
Stdlib only: runs under any Python 3.11.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import (
    ALL_SYSTEMS,
    AUDIT_SYSTEMS,
    BENCH,
    DATA,
    README,
    RESULTS,
    ROOT,
    VENVS,
    log,
    python_of,
)
from report import fmt, markdown, summarize, targets, write_readme
from servers import (
    RedisServer,
    audit_wired,
    evalsha_ceilings,
    fresh_database,
    pin,
    pin_postgres,
    postgres_pid,
    start_postgres,
    stop_postgres,
)

# Full-scale N of each scenario (--scale multiplies them).
SCENARIO_N = {
    "e2e_split": 10_000,  # the headline: producer and worker in separate processes, as users deploy
    "enqueue": 20_000,
    "enqueue_bulk": 20_000,
    "drain": 20_000,
    "e2e": 10_000,
    "e2e_at": 10_000,
    "paced": 2_000,
    "paced_at": 2_000,
    "paced_split": 2_000,  # paced_at with the producer in a process of its own
    "delayed_burst": 2_000,
    "delayed_spread": 500,
    "retry": 2_000,
    "memory": 100_000,
    "claim": 20_000,
    "drain_priority": 20_000,
    "rate_limited": 10_000,  # ~5 s at the 2,000/s limit
}
ALL_SCENARIOS = tuple(SCENARIO_N)
CEILING_REQUESTS = 1_000_000


# ----------------------------------------------------------------------------- runs
def run_one(
    server: RedisServer,
    system: str,
    scenario: str,
    n: int,
    rep: int,
    pg_url: str,
    profile: str | None,
    relay_core: int | None = None,
) -> dict[str, Any]:
    server.command("FLUSHALL")
    base = system.split("+")[0]
    timeout = 300 if scenario != "memory" else 900
    cmd = [
        *pin(1),
        str(python_of(system)),
        str(BENCH / "driver.py"),
        "--system",
        base,
        "--scenario",
        scenario,
        "--redis",
        server.url,
        "--n",
        str(n),
        "--rep",
        str(rep),
        "--timeout",
        str(timeout - 60),
    ]
    if system in AUDIT_SYSTEMS:
        try:
            cmd += [
                "--audit",
                "--database-url",
                fresh_database(pg_url),
                "--pg-pid",
                str(postgres_pid()),
            ]
            if system == "horae+audit-proc":
                cmd += ["--relay-process"] + (
                    [] if relay_core is None else ["--relay-core", str(relay_core)]
                )
        except RuntimeError as exc:
            return {
                "system": system,
                "scenario": scenario,
                "rep": rep,
                "n": n,
                "status": f"error: {exc}",
            }
    if profile and base == "horae":
        pdir = BENCH / "profiles"
        pdir.mkdir(exist_ok=True)
        spy = VENVS / "tools" / "bin" / "py-spy"
        out = pdir / f"{system}-{scenario}-{rep}.txt"
        cmd = [
            *pin(1),
            str(spy),
            "record",
            "--subprocesses",
            "--format",
            "raw",
            "--rate",
            "1000",
            "-o",
            str(out),
            "--",
            *cmd[len(pin(1)) :],
        ]
    t0 = time.monotonic()
    snap = cpu_snapshot(server.proc.pid)
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=BENCH,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
    except subprocess.TimeoutExpired:
        return {
            "system": system,
            "scenario": scenario,
            "rep": rep,
            "n": n,
            "status": f"killed after {timeout} s",
        }
    line = next(
        (ln for ln in proc.stdout.splitlines()[::-1] if ln.startswith("BENCH-RESULT ")), None
    )
    if line is None:
        return {
            "system": system,
            "scenario": scenario,
            "rep": rep,
            "n": n,
            "status": f"error: exit {proc.returncode}",
            "stderr": proc.stderr[-3000:],
        }
    result = json.loads(line[len("BENCH-RESULT ") :])
    result["wall_s"] = round(time.monotonic() - t0, 2)
    result["cpu"] = contention(snap, cpu_snapshot(server.proc.pid))
    if proc.stderr.strip():
        result["stderr_tail"] = proc.stderr[-1500:]
    return result


def cpu_snapshot(redis_pid: int) -> tuple[float, float, float, float]:
    """(wall s, busy CPU-s of the whole machine, CPU-s of our finished children, CPU-s of our
    Redis)."""
    hz = os.sysconf("SC_CLK_TCK")
    busy = 0.0
    try:
        f = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        vals = [int(x) for x in f]
        busy = (sum(vals[:8]) - vals[3] - vals[4]) / hz  # all but idle and iowait
        st = Path(f"/proc/{redis_pid}/stat").read_text().rpartition(")")[2].split()
        redis_cpu = (int(st[11]) + int(st[12])) / hz
    except (OSError, IndexError, ValueError):
        redis_cpu = 0.0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic(), busy, ru.ru_utime + ru.ru_stime, redis_cpu


def contention(
    before: tuple[float, float, float, float], after: tuple[float, float, float, float]
) -> dict[str, float]:
    """CPU used during a run by processes that are not ours (other sessions' tests, ...), in
    cores."""
    wall = max(1e-9, after[0] - before[0])
    total, ours, redis = after[1] - before[1], after[2] - before[2], after[3] - before[3]
    return {
        "machine_busy_cores": round(total / wall, 2),
        "driver_cores": round(ours / wall, 2),
        "redis_cores": round(redis / wall, 2),
        "foreign_cores": round(max(0.0, total - ours - redis) / wall, 2),
    }


def engine_revision() -> str:
    """The last commit that changed the engine (scheduler/, listeners/, audit/), plus "+dirty"
    when they differ from it (commits elsewhere, docs or bench, do not count)."""
    try:
        rev = subprocess.run(
            ["git", "log", "-1", "--format=%h", "--", "scheduler", "listeners", "audit"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "scheduler",
                "listeners",
                "audit",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.strip()
        return (rev or "?") + ("+dirty" if dirty else "")
    except OSError:
        return "?"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "os": platform.platform(),
    }


# ----------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--scale", type=float, default=1.0, help="multiply every scenario's N (e.g. 0.1)"
    )
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    p.add_argument("--scenarios", default=",".join(ALL_SCENARIOS))
    p.add_argument(
        "--no-ceiling", action="store_true", help="skip the redis-benchmark EVALSHA ceilings"
    )
    p.add_argument(
        "--no-readme", action="store_true", help="do not rewrite the table in bench/README.md"
    )
    p.add_argument(
        "--readme-part",
        metavar="NAME",
        help="write this run's table as a block of its own at the end "
        "of the README table (added or replaced by name) instead of rewriting the table",
    )
    p.add_argument(
        "--merge",
        metavar="JSON",
        help="start from an earlier results file: its runs are kept except "
        "the (system, scenario) pairs this invocation runs "
        "again; its ceilings are kept with --no-ceiling",
    )
    p.add_argument(
        "--relay-core",
        type=int,
        default=None,
        help="horae+audit-proc: pin its relay process to "
        "this core (default: the client core, where the worker and producer run)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="run horae under py-spy (bench/.venvs/tools) and keep raw stacks in bench/profiles/",
    )
    args = p.parse_args()
    systems = [x for x in args.systems.split(",") if x]
    scenarios = [x for x in args.scenarios.split(",") if x]
    for x in systems:
        if x not in ALL_SYSTEMS:
            raise SystemExit(f"unknown system {x}; choose from {ALL_SYSTEMS}")
        if not python_of(x).exists():
            raise SystemExit(f"{python_of(x)} missing: run `make bench` (it creates the venvs)")
    for x in scenarios:
        if x not in SCENARIO_N:
            raise SystemExit(f"unknown scenario {x}; choose from {ALL_SCENARIOS}")
    if args.relay_core is not None and not (
        pin(args.relay_core) and 0 <= args.relay_core < (os.cpu_count() or 1)
    ):
        raise SystemExit(
            f"--relay-core {args.relay_core}: needs taskset "
            f"and a core in 0..{(os.cpu_count() or 1) - 1}"
        )
    n_of = {sc: max(10, int(SCENARIO_N[sc] * args.scale)) for sc in scenarios}

    server = RedisServer()
    log(
        f"redis: {server.binary} v{server.version} on 127.0.0.1:{server.port}, persistence off "
        f'(--save "" --appendonly no){", pinned to core 0" if pin(0) else ""}'
    )
    log(
        f"clients: each (system, scenario, rep) is a fresh process"
        f"{' pinned to core 1' if pin(1) else ''}; producer and worker share that one process "
        f"and asyncio loop; handler = async no-op that records time.time(); worker concurrency 50"
    )
    if "horae+audit" in systems:
        log(
            "horae+audit: the default settings: the worker's relay runs in a child process of "
            "its own ([audit] relay_process = true), started before the clock, on the client "
            "core; its CPU counts"
        )
    if "horae+audit-proc" in systems:
        where = "on the client core" if args.relay_core is None else f"on core {args.relay_core}"
        log(
            "horae+audit-proc: workers and producers relay nothing; the driver starts `horae "
            f"audit relay` as a process of its own before the clock, {where}, and counts its CPU"
        )
    pg_url = ""
    pg_ours = False
    wired = None
    if any(x in AUDIT_SYSTEMS for x in systems):
        wired = audit_wired()
        if wired:
            pg_url, pg_ours = start_postgres()
            log(
                f"postgres (audit): private embedded server under {DATA} at {pg_url}"
                f"{'' if pg_ours else ' (already running: reused, left running)'}, "
                f"{pin_postgres(0)}"
            )
        else:
            log(
                "horae+audit*: Scheduler(...).audit does not exist "
                "yet -> rows marked 'n/a (audit not wired yet)'"
            )
    report: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "redis": {"binary": server.binary, "version": server.version, "cmdline": server.cmdline},
        "scale": args.scale,
        "reps": args.reps,
        "n": n_of,
        "command": " ".join(["python bench/run.py", *sys.argv[1:]]),
        "process_model": (
            "fresh process per (system, scenario, rep); producer and "
            "worker in one process and loop (e2e_split: producer in a "
            "process of its own); horae+audit: plus the worker's relay child; "
            "horae+audit-proc: plus a `horae audit relay` process"
        ),
        "runs": [],
        "ceilings": [],
        "versions": {},
        "settings": {},
        "horae_revision_at_start": engine_revision(),
    }
    if args.merge:
        old = json.loads(Path(args.merge).read_text())
        again = {(x, sc) for x in systems for sc in scenarios}
        report["runs"] = [r for r in old["runs"] if (r["system"], r["scenario"]) not in again]
        report["ceilings"] = old.get("ceilings", [])
        report["versions"], report["settings"] = old.get("versions", {}), old.get("settings", {})
        report["n"] = {**old.get("n", {}), **n_of}
        report["merged_from"] = str(args.merge)
        report["command"] += f"  (merged into {Path(args.merge).name}: `{old.get('command', '?')}`)"
        if old.get("scale") != args.scale:
            raise SystemExit(
                f"--merge: {args.merge} was run at scale {old.get('scale')}, this at {args.scale}"
            )
    RESULTS.mkdir(exist_ok=True)
    partial = RESULTS / f"bench-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}.json.tmp"
    try:
        if not args.no_ceiling:
            log("redis-benchmark EVALSHA ceilings (-c 50 -P 16):")
            report["ceilings"] = evalsha_ceilings(
                server, max(100_000, int(CEILING_REQUESTS * args.scale))
            )
        for sc in scenarios:
            for rep in range(args.reps):
                for system in systems:
                    if system in AUDIT_SYSTEMS and wired is False:
                        r = {
                            "system": system,
                            "scenario": sc,
                            "rep": rep,
                            "n": n_of[sc],
                            "status": "n/a (audit not wired yet)",
                        }
                    else:
                        r = run_one(
                            server,
                            system,
                            sc,
                            n_of[sc],
                            rep,
                            pg_url,
                            "py-spy" if args.profile else None,
                            args.relay_core,
                        )
                    report["runs"].append(r)
                    if r.get("versions"):
                        report["versions"][system.split("+")[0]] = r["versions"]
                    if r.get("settings"):
                        report["settings"].setdefault(system, {}).update(r["settings"])
                    log(f"  {sc:15s} rep {rep} {system:16s} {short(r)}")
                    partial.write_text(
                        json.dumps(report, indent=1)
                    )  # a crash keeps what was measured
    except BaseException as exc:  # noqa: BLE001 - report what was measured, then re-raise
        report["aborted"] = repr(exc)
        log(f"ABORTED: {exc!r}; writing the runs measured so far")
        raise
    finally:
        server.stop()
        if pg_ours:
            stop_postgres()
        finish(report, args, partial)


def finish(report: dict[str, Any], args: argparse.Namespace, partial: Path) -> None:
    report["horae_revision_at_end"] = engine_revision()
    report["summary"] = summarize(report["runs"])
    report["targets"] = targets(report["summary"], report["ceilings"])
    log("\nsettings used:")
    for system, st in report["settings"].items():
        log(f"  {system}:")
        for k, v in st.items():
            log(f"    {k}: {v}")
    path = partial.with_suffix("")  # bench-<stamp>.json
    path.write_text(json.dumps(report, indent=1))
    partial.unlink(missing_ok=True)
    md = markdown(report)
    log("\n" + md + "\n")
    log(f"results: {path.relative_to(ROOT)}")
    if not args.no_readme and not report.get("aborted"):
        write_readme(md, args.readme_part)
        log(
            f"table written to {README.relative_to(ROOT)}"
            + (f" (block {args.readme_part!r})" if args.readme_part else "")
        )


def short(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        extra = (r.get("traceback") or r.get("stderr") or "").strip().splitlines()[-1:] or [""]
        return f"{r.get('status')} {extra[0][:200]}"
    m = r["metrics"]
    bits = []
    for key in (
        "jobs_per_s",
        "rate_per_s",
        "rate_error_pct",
        "seconds",
        "bytes_per_job",
        "redis_cmds_per_s",
    ):
        if key in m:
            bits.append(f"{key}={fmt(m[key])}")
    for key in ("latency", "lateness"):
        if key in m:
            spread = "/".join(fmt(m[key][p]) for p in ("p50_ms", "p99_ms", "max_ms"))
            bits.append(f"{key} p50/p99/max={spread} ms")
    if "order" in m:
        o = m["order"]
        bits.append(f"inversions={o['inversions_pct']:.4f}% mean_rank={o['mean_rank']}")
    if "exactly_twice" in m:
        bits.append(f"exactly_twice={m['exactly_twice']}")
    fc = r.get("cpu", {}).get("foreign_cores")
    return (
        " ".join(bits)
        + f" ({r.get('wall_s', '?')} s{'' if fc is None else f', foreign CPU {fc} cores'})"
    )


if __name__ == "__main__":
    main()
