"""The chaos run: its own Redis (embedded, AOF) and PostgreSQL, a fault proxy in front of
each, worker processes (one with its clock ahead), the producer (tests/chaos/load.py) and
the seeded fault plan (tests/chaos/plan.py) carried out on the wall clock; then every
fault is healed, the jobs drain, the audit catches up and the checker
(tests/chaos/checker.py) judges the result. `python -m tests.chaos` and
tests/chaos/test_chaos.py run it."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import redis.asyncio as aioredis

from audit.options import RelayOptions
from audit.reader import AuditTrail
from audit.settings import AuditSettings
from tests.chaos import plan as P
from tests.chaos.app import real_ms
from tests.chaos.checker import RunFacts, Verdict, check
from tests.chaos.load import Producer
from tests.chaos.proxy import FaultProxy
from tests.chaos.servers import ChaosPostgres, ChaosRedis
from tests.procs import READY_LINE, child_env, producer

ROOT = Path(__file__).resolve().parents[2]
# How long the schedules may take to fire what is due once the faults end (Producer.crons_fired):
# a worker restarted last may still be starting on a loaded machine.
CRONS_CATCH_UP_S = 30.0


@dataclass(frozen=True)
class RunOptions:
    seed: int
    shape: P.PlanShape
    jobs: int
    appendfsync: str = "always"
    drain_s: float = 60.0


@dataclass
class Outcome:
    faults: Counter[str]
    verdict: Verdict
    producer_errors: list[str]
    fault_errors: list[str]
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.verdict.total() == 0 and not self.producer_errors and not self.fault_errors

    def report(self) -> str:
        return "\n".join(
            [
                "faults injected: " + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())),
                self.verdict.report(),
                f"producer errors: {len(self.producer_errors)} {self.producer_errors[:3]}",
                f"faults that could not be injected: "
                f"{len(self.fault_errors)} {self.fault_errors[:3]}",
                f"violations: {self.verdict.total()}; wall time {self.wall_s:.1f} s",
            ]
        )


class Workers:
    """Worker processes by name; a dead one is started again by `supervise`."""

    def __init__(self, root: Path, env: dict[str, str], skewed: str) -> None:
        self.root, self.env, self.skewed = root, env, skewed
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stopped: set[str] = set()
        self.held: set[str] = (
            set()
        )  # stopped on purpose (a rolling restart): not started again by supervise
        self.starts: Counter[str] = Counter()
        self._logs: list[IO[bytes]] = []

    def spawn(self, name: str) -> None:
        old = self.procs.get(name)
        if old is not None and old.poll() is None:  # (never two of one name; none left unreaped)
            old.kill()
            old.wait(timeout=10)
        self.starts[name] += 1
        log = open(self.root / f"worker-{name}-{self.starts[name]}.log", "wb")  # noqa: SIM115 - closed in close()
        self._logs.append(log)
        env = {**self.env, "CHAOS_CLOCK_OFFSET_S": str(P.SKEW_S if name == self.skewed else 0)}
        # the solo worker is the only one of its topic; a short grace: a rolling restart releases
        # its attempts
        app, grace = (
            ("tests.chaos.app:solo_registry", "0.2")
            if name == P.SOLO
            else ("tests.chaos.app:registry", "5")
        )
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.chaos.worker",
                "worker",
                "--app",
                app,
                "--concurrency",
                "20",
                "--grace",
                grace,
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    async def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for name in self.procs:
            path = self.root / f"worker-{name}-{self.starts[name]}.log"
            while READY_LINE not in path.read_text(errors="replace"):
                if time.monotonic() > deadline or self.procs[name].poll() is not None:
                    raise AssertionError(
                        f"worker {name} not ready:\n{path.read_text(errors='replace')[-3000:]}"
                    )
                await asyncio.sleep(0.1)

    async def supervise(self) -> None:
        """Start again every worker that died (killed by the plan, or gave up while Redis was
        away)."""
        while True:
            for name, proc in list(self.procs.items()):
                if proc.poll() is not None and name not in self.held:
                    self.stopped.discard(name)
                    self.spawn(name)
            await asyncio.sleep(0.2)

    def signal(self, name: str, sig: signal.Signals) -> None:
        try:
            os.kill(self.procs[name].pid, sig)
        except ProcessLookupError:
            pass

    async def stop_all(self, timeout: float = 30) -> None:
        for name in list(self.stopped):
            self.signal(name, signal.SIGCONT)
        for name in self.procs:
            self.signal(name, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in self.procs.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)

    def log_counts(self) -> Counter[str]:
        """How often the workers met a lost reply, by what their logs say (evidence that the
        faults hit script calls, not only idle connections)."""
        marks = {
            "claims given back": "gave back",
            "settlement retries": "retrying while their leases last",
            "late results refused (LEASE_LOST)": "ignored: LEASE_LOST",
            "claim errors": "claim failed",
        }
        text = "".join(p.read_text(errors="replace") for p in self.root.glob("worker-*.log"))
        return Counter({name: text.count(mark) for name, mark in marks.items()})

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        for log in self._logs:
            log.close()


class ChaosRun:
    """One run; `await run()` returns its Outcome; the directory is removed unless it failed."""

    def __init__(self, options: RunOptions, say: Any = print) -> None:
        self.o, self.say = options, say
        self.root = ROOT / ".horae" / f"chaos-{options.seed}-{uuid.uuid4().hex[:6]}"
        self.namespace = f"chaos-{uuid.uuid4().hex[:8]}"
        self.faults: Counter[str] = Counter()
        self.redis_kills_ms: list[int] = []
        self.fault_errors: list[str] = []
        self.plan = P.make_plan(options.seed, options.shape)

    async def run(self) -> Outcome:
        started = time.monotonic()
        self.say(P.describe(self.o.seed, self.o.shape, self.plan))
        (self.root / "runs").mkdir(parents=True)
        self.redis = ChaosRedis(self.root, self.o.appendfsync)  # type: ignore[arg-type]
        self.pg: ChaosPostgres | None = None
        try:
            await asyncio.to_thread(self.redis.start)
            self.pg = await asyncio.to_thread(ChaosPostgres, self.root)
            async with asyncio.timeout(
                self.o.shape.seconds + 2 * self.o.drain_s + 120
            ):  # never hang a build
                outcome = await self._run_with_servers(started)
        finally:
            await asyncio.to_thread(self.redis.close)
            if self.pg is not None:
                await asyncio.to_thread(self.pg.close)
        if outcome.ok:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            self.say(f"kept for inspection: {self.root}")
        return outcome

    async def _run_with_servers(self, started: float) -> Outcome:
        assert self.pg is not None
        self.proxies = {
            "redis": FaultProxy("redis", "127.0.0.1", self.redis.port),
            "postgres": FaultProxy("postgres", "127.0.0.1", self.pg.port),
        }
        for proxy in self.proxies.values():
            await proxy.start()
        lease_ms = int(self.o.shape.lease_s * 1000)
        env = child_env()
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "HORAE_NAMESPACE": self.namespace,
                "HORAE_REDIS_URL": f"redis://127.0.0.1:{self.proxies['redis'].port}/0",
                "HORAE_DATABASE_URL": self.pg.url(self.proxies["postgres"].port),
                "HORAE_WORKER__LEASE_MS": str(lease_ms),
                "HORAE_WORKER__RECOVER_INTERVAL_S": "0.25",
                "HORAE_RETENTION__COMPLETED_COUNT": "10000000",
                "HORAE_ANALYTICS__NIGHTLY": "false",
                "HORAE_AUDIT__CLAIM_IDLE_MS": str(lease_ms),
                "CHAOS_RUNS_DIR": str(self.root / "runs"),
            }
        )
        skewed = next(f.target for f in self.plan if f.kind == P.CLOCK_SKEW)
        workers = Workers(self.root, env, skewed)
        try:
            for i in range(self.o.shape.workers):
                workers.spawn(f"w{i}")
            workers.spawn(P.SOLO)
            await workers.wait_ready()
            self.faults[P.CLOCK_SKEW] += 1
            self.say(
                f"servers and {self.o.shape.workers} workers "
                f"up after {time.monotonic() - started:.1f} s"
            )
            return await self._load_and_faults(workers, started)
        finally:
            await workers.stop_all()
            workers.close()
            for proxy in self.proxies.values():
                await proxy.close()

    async def _load_and_faults(self, workers: Workers, started: float) -> Outcome:
        assert self.pg is not None
        supervisor = asyncio.create_task(workers.supervise())
        async with producer(
            f"redis://127.0.0.1:{self.proxies['redis'].port}/0", self.namespace
        ) as s:
            load = Producer(s, self.o.jobs, self.o.shape.seconds - 3, self.o.seed)
            await load.start_crons()
            t0 = time.monotonic()
            fault_tasks = [
                asyncio.create_task(self._fault(f, t0, workers))
                for f in self.plan
                if f.kind != P.CLOCK_SKEW
            ]
            ticker = asyncio.create_task(self._progress(load, workers, t0))
            await load.run()
            self.say(f"all {len(load.records)} jobs acknowledged at t+{time.monotonic() - t0:.1f}s")
            await asyncio.gather(*fault_tasks)
            ticker.cancel()
            self._heal(workers)
            caught_up = await load.crons_fired(CRONS_CATCH_UP_S)
            self.say(
                f"cron ticks due fired {caught_up:.1f} s after the faults"
                if caught_up is not None
                else f"cron ticks due still not fired {CRONS_CATCH_UP_S:.0f} s after the faults"
            )
            await load.pause_crons()
            self.say(f"load and faults done at {time.monotonic() - started:.1f} s; draining")
            await self._drain(s)
        supervisor.cancel()
        direct = aioredis.Redis.from_url(self.redis.url)
        try:
            options = RelayOptions.from_settings(AuditSettings())
            await AuditTrail(direct, self.namespace, self.pg.url(), options).flush(
                timeout=self.o.drain_s
            )
            await workers.stop_all()
            facts = RunFacts(
                self.namespace,
                self.o.appendfsync,
                load.records,
                load.crons,
                self.redis_kills_ms,
                self.root / "runs",
                load.coalesced,
            )
            verdict = await check(facts, direct, self.pg.url())
        finally:
            await direct.aclose()
        self.faults["worker_restarts"] = (
            sum(workers.starts.values()) - self.o.shape.workers - 1
        )  # (and solo)
        verdict.figures.update(workers.log_counts())
        return Outcome(
            self.faults, verdict, load.errors, self.fault_errors, time.monotonic() - started
        )

    async def _progress(self, load: Producer, workers: Workers, t0: float) -> None:
        """A line every 5 s: where the run is (a stuck run shows where it stuck)."""
        while True:
            await asyncio.sleep(5)
            acked = sum(1 for r in load.records.values() if r.acked_ms)
            self.say(
                f"  t+{time.monotonic() - t0:5.1f}s acked {acked}/{self.o.jobs}, "
                f"faults {sum(self.faults.values())}, worker starts "
                f"{sum(workers.starts.values())}, stopped {sorted(workers.stopped)}"
            )

    async def _drain(self, s: Any) -> None:
        deadline = time.monotonic() + self.o.drain_s
        while True:
            counts = await s.stats()
            if counts["scheduled"] + counts["running"] + counts["retrying"] == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs did not drain in {self.o.drain_s} s: {counts}")
            await asyncio.sleep(0.25)

    def _heal(self, workers: Workers) -> None:
        for proxy in self.proxies.values():
            proxy.heal()
        for name in list(workers.stopped):
            workers.signal(name, signal.SIGCONT)
            workers.stopped.discard(name)

    async def _fault(self, f: P.Fault, t0: float, workers: Workers) -> None:
        """Carry out one fault at its time; a fault that cannot be carried out is reported."""
        if (wait := t0 + f.at_s - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        try:
            await self._inject(f, workers)
        except Exception as exc:  # noqa: BLE001 - reported in the outcome, fails the run
            self.fault_errors.append(f"{f.describe()}: {type(exc).__name__}: {exc}")
            self.say(f"FAULT ERROR {self.fault_errors[-1]}")

    async def _inject(self, f: P.Fault, workers: Workers) -> None:
        assert self.pg is not None
        label = (
            f.kind
            if f.kind in (P.REDIS_KILL, P.POSTGRES_STOP, P.ROLLING_RESTART)
            or f.target.startswith("w")
            else f"{f.kind}_{f.target}"
        )
        self.faults[label] += 1
        if (
            f.kind == P.ROLLING_RESTART
        ):  # SIGTERM (graceful stop), a gap with no worker of its topic, start
            workers.held.add(f.target)
            try:
                workers.signal(f.target, signal.SIGTERM)
                proc = workers.procs[f.target]
                deadline = time.monotonic() + 30
                while proc.poll() is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                if proc.poll() is None:
                    proc.kill()  # stuck (e.g. its Redis cut): the supervisor's way
                    await asyncio.to_thread(proc.wait, 10)
                await asyncio.sleep(f.duration_s)
                workers.spawn(f.target)
            finally:
                workers.held.discard(f.target)
        elif f.kind == P.WORKER_KILL:
            workers.signal(f.target, signal.SIGKILL)  # the supervisor starts it again
        elif f.kind == P.WORKER_STOP:
            proc = workers.procs[f.target]
            workers.stopped.add(f.target)
            workers.signal(f.target, signal.SIGSTOP)
            await asyncio.sleep(f.duration_s)
            if workers.procs[f.target] is proc:
                workers.signal(f.target, signal.SIGCONT)
            workers.stopped.discard(f.target)
        elif f.kind == P.REDIS_KILL:
            self.redis_kills_ms.append(real_ms())
            await asyncio.to_thread(self.redis.kill)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(self.redis.start)
        elif f.kind == P.POSTGRES_STOP:
            await asyncio.to_thread(self.pg.crash)
            await asyncio.sleep(f.duration_s)
            await asyncio.to_thread(self.pg.start)
        else:
            proxy = self.proxies[f.target]
            if f.kind == P.CUT:
                proxy.refusing = True
                proxy.drop_all()
            elif f.kind == P.DELAY:
                proxy.delay_s = P.DELAY_S
            else:
                proxy.reset_replies = True
            await asyncio.sleep(f.duration_s)
            if f.kind == P.CUT:
                proxy.refusing = False
            elif f.kind == P.DELAY:
                proxy.delay_s = 0.0
            else:
                proxy.reset_replies = False
