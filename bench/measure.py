"""What a driver measures with, the same in every system's venv (stdlib only): INFO
over a raw socket, the handler's recorder, and percentiles."""

from __future__ import annotations

import asyncio
import math
import socket
import time
from typing import Any
from urllib.parse import urlsplit


# ------------------------------------------------------------------ tiny sync Redis (INFO only)
def redis_info(url: str, section: str) -> dict[str, str]:
    """INFO <section> over a raw socket (stdlib only, so every venv measures the same way)."""
    parts = urlsplit(url)
    with socket.create_connection(
        (parts.hostname or "127.0.0.1", parts.port or 6379), timeout=10
    ) as sock:
        sock.sendall(f"*2\r\n$4\r\nINFO\r\n${len(section)}\r\n{section}\r\n".encode())
        buf = b""
        while b"\r\n" not in buf:
            buf += sock.recv(65536)
        header, _, rest = buf.partition(b"\r\n")
        size = int(header[1:])
        while len(rest) < size:
            rest += sock.recv(65536)
    out = {}
    for line in rest[:size].decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, _, v = line.partition(":")
            out[k] = v
    return out


def redis_cpu(url: str) -> float:
    """CPU seconds the server has used (user + sys), to tell when Redis itself is the bound."""
    info = redis_info(url, "cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_commands(url: str) -> int:
    """Total commands executed by the server (scripts' inner calls included), INFO excluded."""
    total = 0
    for k, v in redis_info(url, "commandstats").items():
        if k.startswith("cmdstat_") and k != "cmdstat_info":
            total += int(v.split(",")[0].split("=")[1])
    return total


# ------------------------------------------------------------------ recording
class Recorder:
    """What the handler does in every system: note the start time of each run."""

    def __init__(self, n: int, fail_first: bool = False) -> None:
        self.n = n
        self.fail_first = fail_first
        self.first_start = [0.0] * n
        self.last_start = [0.0] * n
        self.runs = [0] * n
        self.total_runs = 0
        self.target = 2 * n if fail_first else n
        self.done = asyncio.Event()
        self.done_at = 0.0

    def on_run(self, payload: dict[str, Any], started: float) -> bool:
        i = payload["i"]
        self.runs[i] += 1
        if self.runs[i] == 1:
            self.first_start[i] = started
        self.last_start[i] = started
        self.total_runs += 1
        if self.total_runs == self.target:
            self.done_at = time.perf_counter()
            self.done.set()
        return self.fail_first and self.runs[i] == 1

    async def wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except TimeoutError:
            raise RuntimeError(
                f"timed out after {timeout:.0f} s: {self.total_runs}/{self.target} runs seen"
            ) from None


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def dist_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {"p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99), "max_ms": max(ms), "min_ms": min(ms)}
