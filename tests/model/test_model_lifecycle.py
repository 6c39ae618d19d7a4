"""Model-based test of the job lifecycle: a hypothesis RuleBasedStateMachine drives the real
Lua scripts on the real Redis through RedisStore, with the inputs the engine builds
(validation.build_job, attempt.settlement, Housekeeping.recover_expired, ticker.fire_due_crons)
and a clock moved by hand, beside the pure model of tests/model/lifecycle.py. After every
step the job hashes, the sorted sets, the counts hash, the outbox events and the cron
schedules must agree with the model, and: a job is in exactly one state set; counts equal
the sets; a stale lease token settles nothing; attempts never exceed max_attempts; each
cron tick creates at most one job; a job scheduled after= parents (some unknown: refused,
nothing written) waits for exactly the parents not done yet, is released once (into the due
set), failed or cancelled by its on_parent_failure, and its claim carries its parents' results.

Flows (Scheduler.flow) are after= wiring made in one step, children first: each node of a
random tree is modelled as a job scheduled after its children, marked with the root's id, and
takes part in every rule above (claims, settling, cancel, retry, delete, time). A flow with a
node's id taken is refused whole, nothing written. Beside the model: a node's event has its
children's results as children_results, get_flow equals the model's tree (one flow in turn
after every step, all after a drain), no job runs before each of its parents ended (by the
outbox; completed, unless it ignores their failures) nor completes twice, and `drain` runs
the workers until nothing is left: no job (flow node or after= child) may be left waiting.

Budget: 200 examples of up to 50 steps in CI (the "ci" profile, derandomized: about 35 s
on the 2-core CI machine); HYPOTHESIS_PROFILE=long runs 10 times as many, new ones each run.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis as sync_redis
import redis.asyncio as aioredis
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from opentelemetry import trace

from horae.settings import Settings, load_settings
from listeners import ListenerRegistry
from listeners.dispatch import DispatchResult, ListenerFailure
from scheduler import Flow, FlowRefused, Scheduler
from scheduler.core.config import CronSettings, RetentionSettings, WorkerSettings
from scheduler.core.cron import next_fire, parse_cron
from scheduler.core.errors import DoNotRetry, UnknownParent
from scheduler.core.flow_tree import FlowNode
from scheduler.core.job import ClaimedJob, NewCron
from scheduler.core.request import JobRequest
from scheduler.core.retry import RetryPolicy
from scheduler.core.validation import build_job
from scheduler.observe.metrics import Metrics
from scheduler.store.pipe import as_map
from scheduler.store.redis import RedisStore
from scheduler.testing.clocks import FakeClock
from scheduler.worker.attempt import arrival, settlement
from scheduler.worker.housekeeping import Housekeeping
from tests.hypothesis_profiles import PROFILE, budget
from tests.model.lifecycle import FINISHED, FOR_PARENTS, WAITING, FlowShape, FlowSpec, Model

START_MS = 1_800_000_000_000
LEASE_MS = 10_000
WORKERS = ("w1", "w2")
TOPICS = ("alpha", "beta")
JOB_IDS = ("j1", "j2", "j3")  # few, so ids collide and operations meet
CRON = CronSettings(misfire_cap=3, misfire_grace_s=5.0)
CRON_BACKOFF = ("exponential", 30_000, 3_600_000)  # the default retry policy a tick's job gets
# The fields of each event type that the model predicts (beside e, id, a, ts).
CHECKED_FIELDS = {
    "scheduled": ("topic", "due", "max_attempts", "cron", "parents"),
    "attempt_started": ("worker", "due"),
    "attempt_failed": ("worker", "outcome"),
    "retry_scheduled": ("next_at",),
    "completed": ("worker", "outcome", "result"),
    "attempt_succeeded": ("worker", "outcome", "result"),
    "cancelled": ("running",),
    "retried": ("from", "due"),
    "attempt_released": ("worker",),
    "deleted": ("from",),
    "failed": ("outcome",),  # parent_failed: a child failed by its parent (after=)
}
SETS = ("due", "active", "completed", "failed", "cancelled", "waiting_parents")
N_SETS = len(SETS)
PARENT_FAILURE = st.sampled_from(["fail", "ignore", "cancel"])
ATTEMPTS = st.integers(1, 3)
BACKOFFS = st.sampled_from(
    [("fixed", 1_000, 1_000), ("exponential", 1_000, 3_000), ("exponential", 2_000, 60_000)]
)
SETTLE_KINDS = ("succeeded", "succeeded_result", "failed", "do_not_retry", "timed_out")
FLOW_NODES = 10  # the most jobs a generated flow holds (a tree 1 to 3 levels deep)
ENDS = ("completed", "failed", "cancelled", "deleted")  # the events a job ends with


class Lifecycle(RuleBasedStateMachine):
    """One namespace per example; `runner` and `redis_url` are set by the test."""

    runner: asyncio.Runner
    redis: aioredis.Redis
    redis_url: str
    settings: Settings  # a Scheduler's (Scheduler.flow, get_flow), but for the namespace

    def __init__(self) -> None:
        super().__init__()
        self.ns = f"t-model-{uuid.uuid4().hex[:10]}"
        self.store = RedisStore(self.redis, self.ns)
        self.clock = FakeClock(START_MS)
        self.model = Model(START_MS)
        self.claimed: list[ClaimedJob] = []  # every lease ever issued (the old ones are stale)
        self.holders: list[str] = []  # the worker of each
        self.last_event = "0-0"
        self.tracer = trace.get_tracer("model-test")
        self.housekeeping = Housekeeping(
            self.store,
            self.clock,
            WorkerSettings(lease_ms=LEASE_MS),
            RetentionSettings(),
            Metrics(),
            {},
            lambda *args, **kwargs: None,
            self._noop,
        )
        self.scheduler: Scheduler | None = None  # made by the first flow (_scheduler)
        self.flows_made = 0  # numbers the flows' node ids
        self.roots: dict[str, None] = {}  # every flow root created (maybe deleted since)
        self.checks = 0  # the invariant's runs (which flow it reads)
        # No child released early: for each job scheduled after= parents (flow nodes too),
        # the first end event (completed, failed, cancelled, deleted) of each parent since the
        # child was created, "" while none; None once an operator retried the child (it then
        # runs whatever its parents did).
        self.waits: dict[str, dict[str, str] | None] = {}
        self.completions: Counter[str] = Counter()  # completed events since its scheduled one

    async def _noop(self) -> None:
        return None

    def run(self, coro: Any) -> Any:
        return self.runner.run(coro)

    def teardown(self) -> None:
        # The namespace is deleted even when closing fails (a failing example's broken loop):
        # failed runs left thousands of keys on the machine's Redis before.
        try:
            self.run(self.store.aclose())
        finally:
            client = sync_redis.Redis.from_url(self.redis_url)
            try:
                keys = list(client.scan_iter(match="{" + self.ns + "}:*", count=1000))
                if keys:
                    client.delete(*keys)
            finally:
                client.close()

    # ---------------------------------------------------------------- rules
    @initialize(
        jobs=st.lists(
            st.tuples(
                st.sampled_from(JOB_IDS),
                st.sampled_from(TOPICS),
                st.just(0),
                ATTEMPTS,
                BACKOFFS,
                st.booleans(),
            ),
            min_size=1,
            max_size=3,
        )
    )
    def start(self, jobs: list[tuple[str, str, int, int, tuple[str, int, int], bool]]) -> None:
        """Begin with jobs due now, so the steps after meet running attempts early."""
        for job in jobs:
            self.schedule(*job)

    @rule(
        job_id=st.sampled_from(JOB_IDS),
        topic=st.sampled_from(TOPICS),
        delay_ms=st.sampled_from([0, 0, 500, 1_000, 5_000, 20_000]),
        attempts=ATTEMPTS,
        backoff=BACKOFFS,
        local=st.booleans(),
        after=st.lists(st.sampled_from((*JOB_IDS, "ghost")), max_size=2, unique=True),
        on_parent_failure=PARENT_FAILURE,
    )
    def schedule(
        self,
        job_id: str,
        topic: str,
        delay_ms: int,
        attempts: int,
        backoff: tuple[str, int, int],
        local: bool,
        after: list[str] | None = None,
        on_parent_failure: str = "fail",
    ) -> None:
        now = self.clock.now_ms()
        kind, delay, cap = backoff
        retry = {"attempts": attempts, "backoff": {"type": kind, "delay": delay, "max_delay": cap}}
        job = build_job(
            JobRequest(
                topic=topic,
                run_at_ms=now + delay_ms,
                payload={"n": job_id},
                retry=retry,
                job_id=job_id,
                after=after or None,
                on_parent_failure=on_parent_failure,
            ),
            default_retry=RetryPolicy(),
            default_timeout_ms=60_000,
            now_ms=now,
        )
        parents = tuple(after or ())
        ended = {p: j.state if j.state in FINISHED else "" for p, j in self.model.jobs.items()}
        created = self.model.schedule(
            job_id, topic, now + delay_ms, attempts, backoff, after=parents, mode=on_parent_failure
        )
        if created is None:  # a parent does not exist: refused, nothing written
            with pytest.raises(UnknownParent):
                self.run(self.store.enqueue_for(job, now, WORKERS[0] if local else "", LEASE_MS))
            event("schedule -> unknown parent")
            return
        done, leased = self.run(
            self.store.enqueue_for(job, now, WORKERS[0] if local else "", LEASE_MS)
        )
        assert done.result.created is created, (done, created)
        if parents and created:
            event(f"schedule after -> {self.model.jobs[job_id].state}")
            self.waits[job_id] = {p: ended[p] for p in parents}
        token = (
            self.model.local_handoff(job_id, WORKERS[0], LEASE_MS)
            if created and local and not parents
            else None
        )
        assert (leased.token if leased else None) == token
        if leased is not None:
            self.claimed.append(leased)
            self.holders.append(WORKERS[0])

    @precondition(lambda self: self.model.jobs)
    @rule(
        data=st.data(),
        job_id=st.sampled_from((*JOB_IDS, "c1", "c2")),
        delay_ms=st.sampled_from([0, 0, 1_000, 20_000]),
        on_parent_failure=PARENT_FAILURE,
    )
    def schedule_after(
        self, data: st.DataObject, job_id: str, delay_ms: int, on_parent_failure: str
    ) -> None:
        """A child of jobs the namespace has (in any state), now and then of a missing one too."""
        after = data.draw(
            st.lists(
                st.sampled_from([*sorted(self.model.jobs) * 9, "ghost"]),
                min_size=1,
                max_size=3,
                unique=True,
            )
        )
        self.schedule(
            job_id, "beta", delay_ms, 2, ("fixed", 1_000, 1_000), False, after, on_parent_failure
        )

    def _scheduler(self) -> Scheduler:
        """The namespace's Scheduler (its flow calls), on the machine's clock."""
        if self.scheduler is None:
            settings = self.settings.model_copy(update={"namespace": self.ns})
            scheduler = Scheduler(settings=settings, listeners=ListenerRegistry(), clock=self.clock)
            # connected to the machine's store (connect() would build another: a store compiles
            # every script, some 60 ms an example); closed with it
            scheduler._store, scheduler._clock = self.store, self.clock
            self.scheduler = scheduler
        return self.scheduler

    @rule(data=st.data(), depth=st.integers(1, 3), renamed=st.integers(0, 3))
    def schedule_flow(self, data: st.DataObject, depth: int, renamed: int) -> None:
        """Scheduler.flow: a tree `depth` levels deep below its root (1 to 4 children a node,
        at most FLOW_NODES jobs), each node of a random topic, retry policy, delay and
        on_child_failure. Now and then (renamed 0) one node takes the id of a job the
        namespace has (or of a JOB_IDS one): the whole flow is refused (FlowRefused, or for
        the root the root's id returned), nothing written."""
        now = self.clock.now_ms()
        self.flows_made += 1
        nodes: list[dict[str, Any]] = []  # children first, the root last
        room = [FLOW_NODES - 1]

        def draw(level: int, path: str) -> int:
            wanted, topic, delay_ms, attempts, backoff, mode, name = data.draw(
                st.tuples(
                    st.integers(1 if level == 0 else 0, 4 if level < depth else 0),
                    st.sampled_from(TOPICS),
                    st.sampled_from([0, 0, 500, 1_000, 20_000]),
                    ATTEMPTS,
                    BACKOFFS,
                    st.sampled_from([None, "fail", "ignore", "cancel"]),
                    st.sampled_from(["on_child_failure", "on_parent_failure"]),
                )
            )
            n = min(wanted, room[0])
            room[0] -= n
            node: dict[str, Any] = {
                "topic": topic,
                "delay_ms": delay_ms,
                "attempts": attempts,
                "backoff": backoff,
                "mode": mode,
                "name": name,
                "path": path,
            }
            node["kids"] = [
                draw(level + 1, f"{path}{'.' if path else ''}children[{i}]") for i in range(n)
            ]
            node["id"] = f"f{self.flows_made}.{len(nodes)}"
            nodes.append(node)
            return len(nodes) - 1

        draw(0, "")
        if renamed == 0:
            taken = data.draw(st.sampled_from(sorted({*JOB_IDS, *self.model.jobs})))
            nodes[data.draw(st.integers(0, len(nodes) - 1))]["id"] = taken
        flows: list[Flow] = []
        specs: list[FlowSpec] = []
        for node in nodes:
            kids = tuple(nodes[k]["id"] for k in node["kids"])
            kind, delay, cap = node["backoff"]
            keywords: dict[str, Any] = {
                "job_id": node["id"],
                "retry": {
                    "attempts": node["attempts"],
                    "backoff": {"type": kind, "delay": delay, "max_delay": cap},
                },
            }
            if node["delay_ms"]:
                keywords["delay"] = f"{node['delay_ms']}ms"
            if node["mode"] is not None:
                keywords[node["name"]] = node["mode"]
            flows.append(
                Flow(
                    node["topic"],
                    {"n": node["id"]},
                    [flows[k] for k in node["kids"]],
                    **keywords,
                )
            )
            specs.append(
                FlowSpec(
                    node["id"],
                    node["topic"],
                    now + node["delay_ms"],
                    node["attempts"],
                    node["backoff"],
                    kids,
                    node["mode"] or "fail",
                )
            )
        root = specs[-1].id
        first = self.model.create_flow(specs)
        scheduler = self._scheduler()
        if first is None or first == root:  # created, or the root's id taken: its id returned
            assert self.run(scheduler.flow(flows[-1])) == root
        else:
            with pytest.raises(FlowRefused) as refused:
                self.run(scheduler.flow(flows[-1]))
            path = next(n["path"] for n in nodes if n["id"] == first)
            assert refused.value.field == f"{path}.job_id", refused.value
        if first is not None:  # nothing of it written (the invariant checks the model's jobs)
            k = self.store.keys
            fresh = [n["id"] for n in nodes if n["id"] not in self.model.jobs]
            written = self.run(
                self.store.wire.call_many(
                    [("EXISTS", k.job(i), k.parent_results(i), k.children(i)) for i in fresh]
                )
            )
            assert not any(int(n) for n in written), (fresh, written)
            event(f"flow -> refused ({'root' if first == root else 'node'})")
            return
        event(f"flow of {len(nodes)} -> {self.model.jobs[root].state}")
        self.roots[root] = None
        for spec in specs:
            if spec.children:
                self.waits[spec.id] = {c: "" for c in spec.children}

    @rule(worker=st.sampled_from(WORKERS), limit=st.integers(1, 3))
    def claim(self, worker: str, limit: int) -> None:
        now = self.clock.now_ms()
        jobs, next_due, _ = self.run(self.store.claim(now, limit, LEASE_MS, worker))
        expected, expected_next = self.model.claim(worker, limit, LEASE_MS)
        assert [(j.id, j.attempt, j.token) for j in jobs] == expected
        assert next_due == expected_next
        for j in jobs:  # event.parent_results: what its done parents returned
            m = self.model.jobs[j.id]
            want = {p: json.loads(r) for p, r in m.pr.items() if r} if m.parents else None
            assert (json.loads(j.parent_results_json) if j.parent_results_json else None) == want
            # a flow's node reads them as event.children_results (its parents are its children)
            assert j.flow_root == m.flow, (j.id, j.flow_root, m.flow)
            arrived = arrival(j)
            got = (dict(arrived.children_results), dict(arrived.parent_results))
            assert got == ((want or {}, {}) if m.flow else ({}, want or {})), (j.id, got, want)
            self._check_released(j.id)
        self.claimed.extend(jobs)
        self.holders.extend(worker for _ in jobs)

    def _check_released(self, job_id: str) -> None:
        """A job scheduled after= parents (a flow's node after its children) runs only once
        each of them ended (by the outbox), completed unless it ignores their failures."""
        ended = self.waits.get(job_id)
        if ended is None:  # no parents, or an operator retried it
            return
        pending = sorted(p for p, how in ended.items() if not how)
        assert not pending, f"{job_id} runs before its parents {pending} ended"
        if self.model.jobs[job_id].mode != "ignore":
            assert set(ended.values()) == {"completed"}, (job_id, ended)

    @rule(ms=st.sampled_from([1, 999, 1_000, 4_000, LEASE_MS, LEASE_MS + 1, 30_000, 61_000]))
    def advance(self, ms: int) -> None:
        self.clock.set_ms(self.clock.now_ms() + ms)
        self.model.now = self.clock.now_ms()

    @precondition(lambda self: self.claimed)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        picked = data.draw(
            st.lists(st.integers(0, len(self.claimed) - 1), min_size=1, max_size=3, unique=True)
        )
        leases = [(self.claimed[n].id, self.claimed[n].token) for n in picked]
        lost = self.run(self.store.extend_leases(leases, self.clock.now_ms(), LEASE_MS))
        assert lost == self.model.heartbeat([(self.claimed[n].id, n) for n in picked], LEASE_MS)

    def some_job(self) -> st.SearchStrategy[str]:
        """A job the namespace has (cron ticks included)."""
        return st.sampled_from(sorted(self.model.jobs))

    def held(self) -> list[int]:
        """The leases (indexes into claimed) that still hold their job."""
        jobs = self.model.jobs
        return [
            n
            for n, j in enumerate(self.claimed)
            if j.id in jobs and jobs[j.id].token and jobs[j.id].lease_no == n
        ]

    def stale(self) -> list[int]:
        """The leases that were lost, settled or recovered: their tokens must settle nothing."""
        held = set(self.held())
        return [n for n in range(len(self.claimed)) if n not in held]

    def unfinished(self) -> bool:
        """Whether a job waits or runs (a cancelled one's attempt too)."""
        return any(j.state not in FINISHED or j.token for j in self.model.jobs.values())

    @precondition(lambda self: self.held())
    @rule(data=st.data(), how=st.sampled_from(SETTLE_KINDS))
    def settle(self, data: st.DataObject, how: str) -> None:
        """A worker settles an attempt it holds."""
        self._settle(data.draw(st.sampled_from(self.held())), how)

    @precondition(lambda self: self.stale())
    @rule(data=st.data(), how=st.sampled_from(SETTLE_KINDS))
    def settle_stale(self, data: st.DataObject, how: str) -> None:
        """A worker settles an attempt it held once: a late result after recovery, a retry, a
        release."""
        self._settle(data.draw(st.sampled_from(self.stale())), how)

    def _settle(self, lease_no: int, how: str) -> None:
        job, now = self.claimed[lease_no], self.clock.now_ms()
        if how.startswith("succeeded"):
            # succeeded_result: its listener returns a value (the lease's number, so a stale
            # attempt's result is told apart); succeeded: it returns None, nothing is kept
            returned = (("listener", {"lease": lease_no}),) if how == "succeeded_result" else ()
            item = settlement(job, DispatchResult(listeners=1, results=returned), now)
            code = self.run(self.store.complete([item], now, 1_000_000))[0]
            event(f"complete -> {code}")
            assert code == self.model.complete(
                job.id, lease_no, self.holders[lease_no], item.result_json
            )
            return
        exc = DoNotRetry("no") if how == "do_not_retry" else RuntimeError("boom")
        failures = () if how == "timed_out" else (ListenerFailure("listener", exc),)
        item = settlement(
            job, DispatchResult(listeners=1, failures=failures, timed_out=how == "timed_out"), now
        )
        mjob = self.model.jobs.get(job.id)
        if (
            mjob is not None and mjob.token and mjob.lease_no == lease_no
        ):  # the engine's retry rule, against the model's
            assert item.retry_at_ms == self.model.retry_at(mjob, job.attempt, how == "do_not_retry")
            assert job.attempt == mjob.attempts <= mjob.max_attempts
        code = self.run(self.store.fail([item], now))[0]
        event(f"fail -> {code}")
        outcome = "timed_out" if how == "timed_out" else "failed"
        assert code == self.model.fail(
            job.id, lease_no, self.holders[lease_no], outcome, item.retry_at_ms
        )

    @rule()
    def recover(self) -> None:
        """Housekeeping.recover_expired: attempts whose lease passed fail as worker_lost."""
        expired = self.model.expired()
        recovered = self.run(self.housekeeping.recover_expired())
        for job in expired:
            retry_at = self.model.retry_at(job, job.attempts, False)
            assert (
                self.model.fail(
                    job.id, job.lease_no, self.holders[job.lease_no], "worker_lost", retry_at, True
                )
                > 0
            )
        assert recovered == len(expired)

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(self.some_job())
        code = self.run(self.store.cancel(job_id, self.clock.now_ms()))
        event(f"cancel -> {code}")
        assert code == self.model.cancel(job_id)

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        job_id = data.draw(self.some_job())
        code = self.run(self.store.retry_job(job_id, self.clock.now_ms(), "op"))
        event(f"retry -> {code}")
        assert code == self.model.retry(job_id)

    @precondition(lambda self: self.claimed)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """A worker stopping gracefully gives a lease back (a held one, or one it lost
        meanwhile)."""
        n = data.draw(st.integers(0, len(self.claimed) - 1))
        job = self.claimed[n]
        released = self.run(self.store.release([(job.id, job.token)], self.clock.now_ms()))
        assert released == self.model.release(job.id, n)

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        job_id = data.draw(self.some_job())
        code = self.run(self.store.delete_job(job_id, self.clock.now_ms(), "op"))
        assert code == self.model.delete(job_id)

    @precondition(lambda self: self.unfinished())
    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        """Workers run until nothing is left to run, each attempt settled as drawn, the clock
        moved to the next due time: then no job waits (for its time or its parents) and none
        runs. No node lost: every child (a flow's every node) ends once its parents did."""
        for _ in range(300):  # (each job ends after at most 3 attempts)
            for n in self.held():
                self._settle(n, data.draw(st.sampled_from(SETTLE_KINDS)))
            self.run(self._read_outbox())  # (before a claim: _check_released reads it)
            self.claim(WORKERS[0], 50)
            if not self.held():
                due = [j.due for j in self.model.jobs.values() if j.state in WAITING]
                if not due:
                    break
                self.advance(max(0, min(due) - self.clock.now_ms()))
        left = [j for j in self.model.jobs.values() if j.state not in FINISHED or j.token]
        assert not left, f"the model left jobs unfinished: {left}"
        k = self.store.keys
        waiting = self.run(
            self.store.wire.call_many(
                [("ZCARD", k.due), ("ZCARD", k.active), ("ZCARD", k.waiting_parents)]
            )
        )
        assert [int(n) for n in waiting] == [0, 0, 0], f"jobs left in due/active/wfp: {waiting}"
        self.run(self._check_flows(list(self.roots)))  # every flow, each node ended

    async def _check_flows(self, roots: list[str]) -> None:
        """These flows as get_flow shows them (read side by side) equal the model's trees."""
        scheduler = self._scheduler()
        flows = await asyncio.gather(*(scheduler.get_flow(r) for r in roots))
        for root, got in zip(roots, flows):
            assert _shape(got) == self.model.flow_tree(root), (root, got)

    @rule()
    def unknown_job(self) -> None:
        """Operations on an id the namespace never had change nothing."""
        now = self.clock.now_ms()
        assert self.run(self.store.cancel("unknown", now)) == self.model.cancel("unknown") == -3
        assert (
            self.run(self.store.retry_job("unknown", now, "op"))
            == self.model.retry("unknown")
            == -3
        )

    @rule(
        name=st.sampled_from(["c1", "c2"]),
        every_s=st.sampled_from([1, 5, 15]),
        misfire=st.sampled_from(["coalesce", "skip", "all"]),
    )
    def upsert_cron(self, name: str, every_s: int, misfire: str) -> None:
        now = self.clock.now_ms()
        spec = parse_cron(f"*/{every_s} * * * * *", "UTC")
        job = build_job(
            JobRequest(topic="alpha", metadata={"cron": name}, job_id=f"cron:{name}", cron=name),
            default_retry=RetryPolicy(),
            default_timeout_ms=60_000,
        )
        code = self.run(
            self.store.upsert_cron(
                NewCron(name, spec.expr, misfire, next_fire(spec, now), job), now
            )
        )
        assert code == self.model.upsert_cron(
            name, every_s, "alpha", misfire, RetryPolicy().attempts
        )

    @rule(racers=st.integers(1, 2))
    def fire_crons(self, racers: int) -> None:
        """Two workers firing at once: each due tick still becomes one job."""
        from scheduler.worker.ticker import fire_due_crons

        async def race() -> list[int]:
            return list(
                await asyncio.gather(
                    *(
                        fire_due_crons(self.store, self.clock, CRON, self.tracer)
                        for _ in range(racers)
                    )
                )
            )

        created = sum(self.run(race()))
        assert created == self.model.fire(
            CRON.misfire_cap, int(CRON.misfire_grace_s * 1000), CRON_BACKOFF
        )

    # ----------------------------------------------------------- invariants
    @invariant()
    def redis_agrees(self) -> None:
        self.run(self._check())

    async def _check(self) -> None:
        k, w = self.store.keys, self.store.wire
        replies = await w.call_many(
            [("ZRANGE", getattr(k, s), 0, -1, "WITHSCORES") for s in SETS]
            + [("HGETALL", k.counts), ("XRANGE", k.outbox, "(" + self.last_event, "+")]
            + [("HGETALL", k.job(i)) for i in sorted(self.model.jobs)]
            + [("HGETALL", k.parent_results(i)) for i in sorted(self.model.jobs)]
            + [("HGETALL", k.cron(n)) for n in sorted(self.model.crons)]
            + [("ZRANGE", k.crons_due, 0, -1, "WITHSCORES")]
        )
        sets = {s: {m: int(float(v)) for m, v in as_map(r).items()} for s, r in zip(SETS, replies)}
        expected = self.model.sets()
        owners = Counter(m for members in sets.values() for m in members)
        assert all(n == 1 for n in owners.values()), f"a job in more than one state set: {sets}"
        for name in SETS:
            assert set(sets[name]) == set(expected[name]), (name, sets[name], expected[name])
        assert sets["due"] == expected["due"]
        assert sets["active"] == expected["active"]
        counts = {f: int(v) for f, v in as_map(replies[N_SETS]).items() if int(v) != 0}
        assert counts == self.model.counts()
        # The sets and the counts agree: a cancelled job whose attempt runs is counted as
        # cancelled while it holds its place in the active set.
        held_cancelled = sum(
            1 for j in self.model.jobs.values() if j.state == "cancelled" and j.token
        )
        totals = Counter()
        for f, v in counts.items():
            totals[f.rpartition("|")[2]] += v
        assert totals["scheduled"] + totals["retrying"] == len(sets["due"])
        assert totals["waiting_for_parents"] == len(sets["waiting_parents"])
        assert totals["running"] == len(sets["active"]) - held_cancelled
        assert totals["cancelled"] == len(sets["cancelled"]) + held_cancelled
        assert totals["completed"] == len(sets["completed"]) and totals["failed"] == len(
            sets["failed"]
        )
        self._check_events(replies[N_SETS + 1])
        n_jobs, first = len(self.model.jobs), N_SETS + 2
        for job_id, flat in zip(
            sorted(self.model.jobs), replies[first + n_jobs : first + 2 * n_jobs]
        ):
            m = self.model.jobs[job_id]
            assert as_map(flat) == m.pr, (job_id, as_map(flat), m.pr)
        for job_id, flat in zip(sorted(self.model.jobs), replies[first : first + n_jobs]):
            h, m = as_map(flat), self.model.jobs[job_id]
            assert h["state"] == m.state, (job_id, h, m)
            assert int(h.get("attempts", 0)) == m.attempts <= m.max_attempts == int(h.get("max", 5))
            assert h.get("token", "") == m.token
            assert h.get("result", "") == m.result, (job_id, h, m)
            assert h.get("froot", "") == m.flow, (job_id, h, m)  # a flow's node: its root
            if m.state in WAITING:
                assert int(h.get("due", h["run_at"])) == m.due
            if m.state == FOR_PARENTS:  # no child lost: it waits for exactly its parents left
                assert int(h["wp"]) == m.wp > 0, (job_id, h, m)
        for name, flat in zip(sorted(self.model.crons), replies[first + 2 * n_jobs : -1]):
            h, c = as_map(flat), self.model.crons[name]
            assert int(h["next"]) == c.next and h["misfire"] == c.misfire
            assert (int(h["last_run"]) if h.get("last_run") else None) == c.last_run
        assert {n: int(float(v)) for n, v in as_map(replies[-1]).items()} == {
            n: c.next for n, c in self.model.crons.items()
        }
        if self.roots:  # a flow as get_flow shows it: each in turn (all at once: +50% run time)
            self.checks += 1
            roots = list(self.roots)
            await self._check_flows([roots[self.checks % len(roots)]])

    async def _read_outbox(self) -> None:
        """The events appended since the last read, checked against the model's."""
        k = self.store.keys
        self._check_events(
            await self.store.wire.call("XRANGE", k.outbox, "(" + self.last_event, "+")
        )

    def _check_events(self, entries: list[Any]) -> None:
        got = []
        for stream_id, flat in entries:
            f = as_map(flat)
            keep = ("e", "id", "a", "ts", *CHECKED_FIELDS.get(f["e"], ()))
            got.append({name: f.get(name, "") for name in keep})
            self.last_event = stream_id
        assert got == self.model.events, f"outbox {got} != model {self.model.events}"
        self.model.events.clear()
        for e in got:
            job_id = e["id"]
            if e["e"] == "scheduled":
                self.completions[job_id] = 0
            elif e["e"] == "completed":  # no job released (and run) twice
                self.completions[job_id] += 1
                assert self.completions[job_id] == 1, f"{job_id} completed twice"
            elif e["e"] == "retried":
                self.waits[job_id] = None
            if e["e"] in ENDS:
                for ended in self.waits.values():
                    if ended is not None and ended.get(job_id) == "":
                        ended[job_id] = e["e"]
            if e["e"] == "deleted":
                self.waits.pop(job_id, None)


def _shape(node: FlowNode | None) -> FlowShape | None:
    """A flow as (id, state, children), what Model.flow_tree gives."""
    if node is None:
        return None
    state = None if node.state is None else node.state.value
    return (node.id, state, tuple(_shape(child) for child in node.children))


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.mark.timeout(0 if PROFILE == "long" else 600)  # a failure shrinks for minutes
def test_lifecycle_matches_the_model(redis_url: str, runner: asyncio.Runner) -> None:
    """The real scripts and the model agree after every step of every generated run."""
    Lifecycle.runner, Lifecycle.redis_url = runner, redis_url
    Lifecycle.redis = aioredis.Redis.from_url(redis_url)
    base = load_settings(path=None, env={}, redis_url=redis_url)
    # no audit relay: the outbox is written and read here, no PostgreSQL needed
    Lifecycle.settings = base.model_copy(
        update={"audit": base.audit.model_copy(update={"relay": False})}
    )
    try:
        run_state_machine_as_test(
            Lifecycle, settings=settings(max_examples=budget(200), stateful_step_count=50)
        )
    finally:
        runner.run(Lifecycle.redis.aclose())
