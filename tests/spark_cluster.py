"""A real Spark standalone cluster on loopback for tests, from the installed
PySpark: one master, N workers (1 core, 512 MiB each), optionally a Spark
Connect server on it. Every process runs in a process group of its own and is
stopped by that group (SIGTERM, then SIGKILL), executors included.

Which worker ran what: each worker's work directory holds one folder per
application it ran an executor for, with the executor's stderr, whose
"Finished task" lines count the tasks it ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from pyspark.find_spark_home import _find_spark_home

from scheduler.ops.servers import free_port

SPARK_HOME: Final = Path(_find_spark_home())
CONNECT_APP: Final = "Spark Connect server"
# Short-lived JVMs on a 2-core machine: C1 only and the serial GC start and finish tiny jobs with
# about 40% less CPU (a local report: 38 -> 22 CPU-s); `-Xlog:cds=off` hides the class-data-sharing
# warnings of the archive below.
JVM_OPTS: Final = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:cds=off"
# What every driver on this cluster sets (the workers have 1 core / 512 MiB; the default executor
# asks 1 GiB and would wait forever). Both executors registered before the first job, no locality
# wait: the work spreads over both workers.
CLUSTER_CONF: Final = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.ui.enabled": "false",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    "spark.locality.wait": "0",
}
# Runtime SQL settings (the only kind a Spark Connect client may set): fewer, smaller stages.
SQL_CONF: Final = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.codegen.wholeStage": "false",
}


def conf_args(conf: dict[str, str], flag: str = "--conf") -> list[str]:
    """[flag, KEY=VALUE, ...] for spark-submit or `horae report`."""
    return [item for key, value in conf.items() for item in (flag, f"{key}={value}")]


@dataclass
class SparkProcess:
    """One JVM (or the script that starts it) in its own process group, with its log."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    def log(self) -> str:
        self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the whole group, SIGKILL to what is left after `grace` s."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                _wait_group_gone(self.proc.pid, wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.log_file.close()


def _wait_group_gone(pgid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise subprocess.TimeoutExpired(f"process group {pgid}", timeout)


class SparkCluster:
    """Master + workers under `root` (logs, work directories, an empty conf directory)."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "512m") -> None:
        self.root = root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.web_port = free_port()
        self.procs: list[SparkProcess] = []
        self.connect: SparkProcess | None = None
        self.connect_port = 0
        self.conf_dir = (
            root / "conf"
        )  # empty: no machine-wide spark-defaults.conf; one for all JVMs
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.classes = root / "spark-classes.jsa"

    @property
    def dump_opts(self) -> str:
        """JVM options of the first driver: it writes the Spark classes it loaded to a
        class-data-sharing archive at exit (same class path as every JVM here: one conf dir)."""
        return f"{JVM_OPTS} -XX:ArchiveClassesAtExit={self.classes}"

    def conf(self) -> dict[str, str]:
        """CLUSTER_CONF, with drivers and executors mapping that archive (a third less CPU per
        JVM start; a JVM started before it exists only warns, silently here, and loads as usual)."""
        shared = f"{JVM_OPTS} -XX:SharedArchiveFile={self.classes}"
        return {
            **CLUSTER_CONF,
            "spark.driver.extraJavaOptions": shared,
            "spark.executor.extraJavaOptions": shared,
        }

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment of every Spark process here (drivers included): loopback only."""
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(SPARK_HOME),
                "SPARK_CONF_DIR": str(self.conf_dir),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.root / "logs"),
                "SPARK_PID_DIR": str(self.root),
                "SPARK_DAEMON_MEMORY": "256m",
                "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS,
                "PYSPARK_PYTHON": sys.executable,
            }
        )
        return env

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> SparkProcess:
        """Start a process in a new session (its own group), output to <root>/<name>.log."""
        log_path = self.root / f"{name}.log"
        log_file = log_path.open("wb")
        proc = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env or self.env(),
            cwd=self.root,
            start_new_session=True,
        )
        spawned = SparkProcess(name, proc, log_path, log_file)
        self.procs.append(spawned)
        return spawned

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=5) as reply:
            return dict(json.load(reply))

    def _until(self, what: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            dead = [p for p in self.procs if p.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name} (returncode {p.proc.poll()}):\n{p.log()[-3000:]}"
                    for p in self.procs
                )
                raise AssertionError(
                    f"Spark cluster: {what} "
                    + ("exited" if dead else f"not after {timeout} s")
                    + f"\n{logs}"
                )
            time.sleep(0.2)

    def start(self, timeout: float = 90.0) -> None:
        """Master, then the workers (once it is ALIVE, so they register at the first try)."""
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        self.spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.web_port),
            ],
        )
        self._until("master ALIVE", lambda: self.state()["status"] == "ALIVE", timeout)
        for n in range(1, self.workers + 1):
            work = self.root / f"worker-{n}"
            self.spawn(
                f"worker-{n}",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    "0",
                    "--work-dir",
                    str(work),
                ],
            )
        self._until(
            f"{self.workers} workers ALIVE",
            lambda: sum(w["state"] == "ALIVE" for w in self.state()["workers"]) == self.workers,
            timeout,
        )

    def spawn_connect(self, conf: dict[str, str]) -> None:
        """Start a Spark Connect server driving this cluster (the connect jar ships in PySpark's
        jars/), without waiting; its driver memory is spark-submit's default, not the daemons'."""
        if self.connect is not None:
            return
        self.connect_port = free_port()
        argv = [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name",
            CONNECT_APP,
            "--master",
            self.master_url,
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={self.connect_port}",
            *conf_args(conf),
        ]
        env = {k: v for k, v in self.env().items() if k != "SPARK_DAEMON_MEMORY"}
        self.connect = self.spawn("connect", argv, {**env, "SPARK_CONNECT_MODE": "0"})

    def connect_url(self, conf: dict[str, str], timeout: float = 120.0) -> str:
        """sc:// URL of the Connect server (started now unless spawn_connect did), once it
        serves."""
        self.spawn_connect(conf)
        server = self.connect
        assert server is not None
        self._until(
            "Spark Connect server started",
            lambda: "Spark Connect server started" in server.log(),
            timeout,
        )
        return f"sc://127.0.0.1:{self.connect_port}"

    def app_named(self, name: str) -> str:
        """The id of the one application of that name."""
        state = self.state()
        ids = [
            app["id"]
            for app in [*state["activeapps"], *state["completedapps"]]
            if app["name"] == name
        ]
        assert len(ids) == 1, f"applications named {name!r}: {ids}"
        return str(ids[0])

    def app_ids(self, but: str = CONNECT_APP) -> set[str]:
        """Every application the master knows (running or completed), but those named `but`."""
        state = self.state()
        return {
            app["id"]
            for app in [*state["activeapps"], *state["completedapps"]]
            if app["name"] != but
        }

    def tasks_by_worker(self, app_id: str) -> dict[str, int]:
        """Tasks each worker's executors finished for an application ("Finished task" lines)."""
        counts: dict[str, int] = {}
        for n in range(1, self.workers + 1):
            logs = (self.root / f"worker-{n}" / app_id).glob("*/stderr")
            counts[f"worker-{n}"] = sum(
                p.read_text(errors="replace").count("Finished task") for p in logs
            )
        return counts

    def stop(self) -> None:
        """Every process, newest first (connect server, workers and their executors, master);
        the class archive is removed."""
        for proc in reversed(self.procs):
            proc.stop()
        self.classes.unlink(missing_ok=True)  # ~180 MB


class Driver:
    """A driver program (horae report, spark-submit) running in its own process group; its
    output goes to a file (a pipe nobody reads while it runs could fill and block it)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.argv = argv
        self.log_path = cwd / "driver.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
            )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def finish(self, timeout: float = 180.0) -> str:
        """Its output once it ended, or AssertionError with it when it failed or ran past `timeout`
        s (then its group, JVM included, is killed)."""
        try:
            self.proc.wait(timeout=timeout)
            _wait_group_gone(
                self.proc.pid, 60
            )  # a JVM ends after its Python (writing its class archive)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.argv[0]} still running after {timeout} s:\n{self.output()[-6000:]}"
            )
        finally:
            self.kill()  # whatever is left (all of it on timeout)
        text = self.output()
        assert self.proc.returncode == 0, (
            f"{' '.join(self.argv[:4])} ... exited {self.proc.returncode}:\n{text[-6000:]}"
        )
        return text

    def kill(self) -> None:
        """SIGKILL to its process group, if any of it is left."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_driver(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 180.0) -> str:
    """Run a driver program to its end; its output (AssertionError when it fails)."""
    return Driver(argv, env, cwd).finish(timeout)
