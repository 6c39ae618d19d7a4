"""The documented deployment as real processes, for the dashboard test: one
`horae worker --metrics-port` and one producer whose Scheduler exports through
`[telemetry] metrics_port` (tests/procs/metrics_app.py), both running this tree's
code (PYTHONPATH, cwd), both scraped over HTTP as Prometheus would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from scheduler.ops.servers import free_port
from tests.procs import READY_LINE, child_env

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.procs.metrics_app"


class Deployment:
    """A worker and a producer process on one namespace; `close()` stops both."""

    def __init__(self, redis_url: str, database_url: str, namespace: str, log_dir: Path) -> None:
        self.ports = {"worker": free_port(), "producer": free_port()}
        self.logs = {name: log_dir / f"{name}.log" for name in self.ports}
        self._files: list[IO[bytes]] = []
        base = child_env()
        base.update(
            {
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "HORAE_REDIS_URL": redis_url,
                "HORAE_NAMESPACE": namespace,
            }
        )
        worker_env = {
            **base,
            "HORAE_DATABASE_URL": database_url,
            "HORAE_ANALYTICS__NIGHTLY": "false",
            "HORAE_WORKER__RECOVER_INTERVAL_S": "0.2",
        }
        producer_env = {
            **base,
            "HORAE_AUDIT__RELAY": "false",
            "HORAE_TELEMETRY__METRICS_PORT": str(self.ports["producer"]),
        }
        self.worker = self._spawn(
            "worker",
            worker_env,
            [
                "-c",
                "from scheduler.cli.main import main; main()",
                "worker",
                "--app",
                f"{APP}:registry",
                "--all-topics",
                "--metrics-port",
                str(self.ports["worker"]),
            ],
        )
        self.producer = self._spawn("producer", producer_env, ["-m", APP], stdio=True)

    def _spawn(
        self, name: str, env: dict[str, str], args: list[str], stdio: bool = False
    ) -> subprocess.Popen[str]:
        log = open(self.logs[name], "wb")  # noqa: SIM115 - closed in close()
        self._files.append(log)
        pipe = subprocess.PIPE if stdio else subprocess.DEVNULL
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env=env,
            text=True,
            stdin=pipe,
            stdout=pipe if stdio else log,
            stderr=log,
        )

    def log(self) -> str:
        return "\n".join(
            f"--- {name}:\n{path.read_text(errors='replace')}" for name, path in self.logs.items()
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the worker runs and the producer connected; both run this tree's code."""
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.logs["worker"].read_text(errors="replace"):
            assert self.worker.poll() is None and time.monotonic() < deadline, (
                f"worker not ready\n{self.log()}"
            )
            time.sleep(0.05)
        self.expect("ready")
        for name, path in self.logs.items():
            code = next(
                (
                    line.split(": ", 1)[1]
                    for line in path.read_text().splitlines()
                    if line.startswith("horae code: ")
                ),
                "?",
            )
            assert Path(code).is_relative_to(ROOT), f"the {name} ran {code}, not {ROOT}"

    def expect(self, word: str) -> None:
        assert self.producer.stdout is not None
        line = self.producer.stdout.readline().strip()
        assert line == word, f"producer said {line!r}, not {word!r}\n{self.log()}"

    def wave(self) -> None:
        """The producer schedules one wave and waits until its jobs are finished."""
        assert self.producer.stdin is not None
        self.producer.stdin.write("wave\n")
        self.producer.stdin.flush()
        self.expect("done")

    def scrape(self) -> dict[str, str]:
        """Each process's /metrics text, by process name."""
        return {
            name: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
            .read()
            .decode()
            for name, port in self.ports.items()
        }

    def close(self) -> None:
        if self.producer.stdin is not None and not self.producer.stdin.closed:
            self.producer.stdin.close()  # end of input: the producer closes its Scheduler and exits
        for proc in (self.worker, self.producer):
            if proc.poll() is None and proc is self.worker:
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self.producer.stdout is not None:
            self.producer.stdout.close()
        for f in self._files:
            f.close()
