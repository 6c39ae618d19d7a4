"""horae+audit-proc: the audit relay as a process of its own (`horae audit relay`), the way a
deployment keeps the relay's CPU off the workers' event loops.

The driver (the worker process) starts it before the clock, with the bench's Redis, the
private PostgreSQL and the bench namespace, and stops it after the scenario. Its pid is
handed to window.py so its CPU counts in CPU per job. The worker (and e2e_split's producer)
run with `[audit] relay = false`: they write outbox events and relay none.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import tempfile
from typing import Any

# `horae audit relay` run by the worker's own interpreter (no entry-point script needed:
# a HORAE_PYTHON of another venv brings its own scheduler package).
RELAY_CMD = [sys.executable, "-c", "from scheduler.cli.main import main; main()", "audit", "relay"]
READY_S = 60.0  # the relay's start-up (imports, first XREADGROUP) must fit in this
STOP_S = 15.0  # SIGTERM, then the relay drains (drain_timeout_s + block_ms) before SIGKILL


class RelayProcess:
    """One `horae audit relay` child: start() returns once it consumes the outbox group."""

    def __init__(
        self, redis_url: str, database_url: str, namespace: str, core: int | None = None
    ) -> None:
        self.redis_url, self.database_url, self.namespace = redis_url, database_url, namespace
        self.core = core  # None: the driver's core (the client core); else pinned there (taskset)
        self.proc: asyncio.subprocess.Process | None = None
        self._stderr = tempfile.TemporaryFile()
        self._drain: asyncio.Task[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def env(self) -> dict[str, str]:
        """The driver's environment without its HORAE_* (the adapter's settings ignore them too),
        plus where to connect: the relay's [audit] tuning is the defaults, as the worker's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HORAE_")}
        env.update(
            HORAE_REDIS_URL=self.redis_url,
            HORAE_DATABASE_URL=self.database_url,
            HORAE_NAMESPACE=self.namespace,
        )
        return env

    async def start(self, redis: Any) -> None:
        """Spawn the relay and wait until it reads the outbox, so its start-up (imports, group,
        take-over) is not inside the measured time."""
        pin = [] if self.core is None else ["taskset", "-c", str(self.core)]
        self.proc = await asyncio.create_subprocess_exec(
            *pin,
            *RELAY_CMD,
            env=self.env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
            preexec_fn=_die_with_parent,
        )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), READY_S)
            if not line:  # it prints "audit relay ... running ..." once started; EOF: it exited
                raise RuntimeError(
                    f"`horae audit relay` did not start: exit {await self.proc.wait()}; "
                    f"stderr: {self.stderr_tail()}"
                )
            await asyncio.wait_for(self._consuming(redis), READY_S)
        except BaseException:
            await self.stop()
            raise
        self._drain = asyncio.get_running_loop().create_task(
            self.proc.stdout.read()
        )  # keep stdout drained

    async def _consuming(self, redis: Any) -> None:
        """Until a client of this Redis waits in XREADGROUP: the relay made the outbox group,
        looked for entries to take over, and reads (its consumer is not a signal: Redis 7.0
        registers it only once a read delivers something)."""
        while True:
            if any(c.get("cmd") == "xreadgroup" for c in await redis.client_list()):
                return
            if self.proc is not None and self.proc.returncode is not None:
                raise RuntimeError(
                    f"`horae audit relay` exited {self.proc.returncode}: {self.stderr_tail()}"
                )
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """SIGTERM (the relay drains and leaves the group), SIGKILL after STOP_S."""
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    def stderr_tail(self, limit: int = 1500) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-limit:]


def _die_with_parent() -> None:
    """In the child: SIGTERM it when the driver dies (run.py kills a driver that overruns)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
