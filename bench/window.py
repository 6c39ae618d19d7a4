"""The measured window of a scenario: an optional profiler, and the CPU every process
involved spent inside it (stdlib only, the same in every system's venv).

CPU per job is steadier than wall time on a shared machine and shows what a feature
really costs: the driver process (all its threads: a relay thread or an exporter counts),
a producer process of its own (e2e_split reports its CPU), helper processes the adapter
runs (horae+audit-proc's relay process, read from /proc), redis-server (INFO cpu, all its
threads) and, for horae's audit, the private PostgreSQL (its postmaster and every backend,
read from /proc: a backend that exits inside the window is in the postmaster's cutime).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from measure import redis_cpu

_HZ = os.sysconf("SC_CLK_TCK")


def postgres_cpu(postmaster: int) -> float:
    """CPU seconds of a PostgreSQL server: the postmaster, its reaped children and its live ones."""
    if not postmaster:
        return 0.0
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited while we looked
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid == postmaster:
            total += sum(int(x) for x in fields[11:15]) / _HZ  # utime stime cutime cstime
        elif ppid == postmaster:
            total += (int(fields[11]) + int(fields[12])) / _HZ
    return total


def process_cpu(pids: list[int]) -> float:
    """CPU seconds (utime + stime, all threads) of these live processes; 0 for one that is gone."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _HZ
    return total


class Window:
    """start()/stop() around what a scenario times; result(n) = CPU µs per job by process."""

    def __init__(self) -> None:
        self.redis_url = ""
        self.pg_pid = 0
        self.profiler: Any = None
        self.other_client_s = (
            0.0  # CPU of client processes other than this one (a producer's own report)
        )
        self.pids: list[int] = []  # helper processes (a relay process): sampled at start and stop
        self._start: tuple[float, float, float, float] | None = None
        self._stop: tuple[float, float, float, float] | None = None

    def setup_profiler(self) -> None:
        """pyinstrument from bench/.venvs/tools, for the measured window only."""
        import glob

        for site in glob.glob(
            os.path.join(
                os.path.dirname(os.path.abspath(__file__)),
                ".venvs",
                "tools",
                "lib",
                "python3*",
                "site-packages",
            )
        ):
            sys.path.append(site)
        from pyinstrument import Profiler

        self.profiler = Profiler(interval=0.0005, async_mode="disabled")

    def _sample(self) -> tuple[float, float, float, float]:
        return (
            time.process_time(),
            process_cpu(self.pids),
            redis_cpu(self.redis_url),
            postgres_cpu(self.pg_pid),
        )

    def start(self) -> None:
        self._start, self._stop, self.other_client_s = self._sample(), None, 0.0
        if self.profiler is not None:
            self.profiler.start()

    def stop(self) -> None:
        if self.profiler is not None and self.profiler.is_running:
            self.profiler.stop()
        if self._start is not None and self._stop is None:
            self._stop = self._sample()

    def result(self, jobs: int) -> dict[str, float] | None:
        """CPU µs per job inside the window: client processes (helpers included, and on their
        own as helpers_us), redis-server, PostgreSQL, total."""
        if self._start is None or self._stop is None or jobs <= 0:
            return None
        client, helpers, redis, pg = (b - a for a, b in zip(self._start, self._stop))
        client += self.other_client_s + helpers
        us = 1e6 / jobs
        out = {
            "client_us": client * us,
            "redis_us": redis * us,
            "postgres_us": pg * us,
            "total_us": (client + redis + pg) * us,
        }
        if self.pids:
            out["helpers_us"] = helpers * us
        return out


WINDOW = Window()
