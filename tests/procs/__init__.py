"""Real worker processes for the multi-process and crash tests.

`WorkerProcesses` starts `horae worker --app tests.procs.worker_app:registry`
subprocesses from the project root (the listeners they run live in
`tests/procs/worker_app.py`), waits until each one reports that it runs, and
kills whatever is still alive when the test ends. Stderr of each process goes
to a log file that is printed when an assertion about the process fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
HORAE = Path(sys.executable).with_name("horae")
APP = "tests.procs.worker_app:registry"
READY_LINE = "running (Ctrl-C to stop)"  # printed by `horae worker` once its loops run


def child_env() -> dict[str, str]:
    """This process's environment for a child process, without its HORAE_* settings (a test
    passes the ones it means) but with HORAE_DATA_DIR: embedded servers a child may start live
    in the run's data directory (tests/conftest.py), never the user's."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith("HORAE_") or k == "HORAE_DATA_DIR"
    }


def app_key(namespace: str, name: str) -> str:
    """A key the listeners of worker_app write; inside the namespace, so cleanup deletes it."""
    return "{" + namespace + "}:test:" + name


@dataclass
class WorkerProcess:
    """One `horae worker` subprocess and its log."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def describe(self) -> str:
        """For assertion messages: the process's state and its log; a worker still running
        is asked first (SIGUSR1) to print what each of its tasks is waiting on."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGUSR1)
            time.sleep(1.0)
        return (
            f"--- worker {self.name} (pid {self.pid}, returncode "
            f"{self.proc.poll()}) log:\n{self.log()}"
        )

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the worker printed that it runs (subscribed, loops started)."""
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.log():
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited before it was ready\n{self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready after {timeout} s\n{self.describe()}")
            await asyncio.sleep(0.05)

    async def wait_exit(self, timeout: float) -> tuple[int | None, float]:
        """(returncode or None if still running after `timeout` s, seconds waited)."""
        start = time.monotonic()
        while self.proc.poll() is None and time.monotonic() - start < timeout:
            await asyncio.sleep(0.02)
        return self.proc.poll(), time.monotonic() - start

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.pid, sig)


class WorkerProcesses:
    """Starts worker subprocesses on one namespace; `close()` kills the leftovers."""

    def __init__(self, redis_url: str, namespace: str, log_dir: Path) -> None:
        self.redis_url, self.namespace, self.log_dir = redis_url, namespace, log_dir
        self.workers: list[WorkerProcess] = []

    def env(self, extra: Mapping[str, str]) -> dict[str, str]:
        env = child_env()
        env.update(
            {
                "HORAE_REDIS_URL": self.redis_url,
                "HORAE_NAMESPACE": self.namespace,
                "HORAE_AUDIT__RELAY": "false",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)
        return env

    def spawn(
        self,
        name: str,
        *,
        concurrency: int = 10,
        grace: float | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        app: str = APP,
    ) -> WorkerProcess:
        args: list[Any] = [
            str(HORAE),
            "worker",
            "--app",
            app,
            "--concurrency",
            str(concurrency),
            *extra_args,
        ]
        if grace is not None:
            args += ["--grace", str(grace)]
        log_path = self.log_dir / f"worker-{name}.log"
        log_file = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=self.env(env or {}),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        worker = WorkerProcess(name, proc, log_path, log_file)
        self.workers.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(w.describe() for w in self.workers)

    def close(self) -> None:
        """SIGKILL and reap every worker still running; close the logs."""
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.kill()
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that ignores SIGKILL
                pass
            w.log_file.close()


def producer(redis_url: str, namespace: str) -> Any:
    """The test's own Scheduler beside the worker processes: real clock, outbox on, no relay.

    Built from explicit settings, never from the environment: with HORAE_DATABASE_URL set
    (CI's second pass) an env-built Scheduler would migrate the machine's shared database.
    """
    from horae.settings import load_settings
    from listeners import ListenerRegistry
    from scheduler import Scheduler

    settings = load_settings(env={}, redis_url=redis_url, namespace=namespace)
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"relay": False})}
    )
    return Scheduler(settings=settings, listeners=ListenerRegistry())


def alive(pid: int) -> bool:
    """Running and not a zombie, read from /proc independently of scheduler/ops/servers.py (a
    daemonized redis-server is reparented to a PID 1 that may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def stop_redis(root: Path) -> None:
    """SIGTERM the embedded redis-server of data dir `root` and wait until it is gone (its state
    file stays, so servers.ensure_redis starts it again on the same port)."""
    pid = int(json.loads((root / "redis" / "state.json").read_text())["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while alive(pid):
        assert time.monotonic() < deadline, f"redis-server {pid} did not stop on SIGTERM"
        time.sleep(0.02)
