"""A small pure-Python model of a job's life in Redis, written from the scripts' headers
and scheduler/core/outbox.py, not from their code: what each transition must answer, which
state, attempts, due time and lease token each job then has, and which outbox events it
appends. test_model_lifecycle.py runs the real scripts beside it and compares. A flow
(create_flow.lua) is after= wiring made in one step: its nodes are scheduled children first,
each after its children, all or nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

WAITING = ("scheduled", "retrying")
FOR_PARENTS = "waiting_for_parents"  # after=: in no due set until its parents are done
FINISHED = ("completed", "failed", "cancelled")


@dataclass
class MJob:
    """One job as the model knows it."""

    id: str
    topic: str
    state: str
    max_attempts: int
    backoff: tuple[str, int, int]  # type, delay ms, max delay ms (no jitter in the model)
    due: int
    attempts: int = 0
    token: str = ""  # the lease token an attempt holds ("" for none)
    lease_no: int = -1  # which lease (Model.leases_issued order) holds it; -1 for none
    lease: int = 0  # the lease deadline while a token is held
    cron: str = ""
    result: str = ""  # the result JSON a succeeded attempt kept ("" for none: no hash field)
    # after= (lua/_deps.lua): its parents, what a parent's failure does, how many parents it
    # still waits for, and the done parents' results (parent id -> JSON; "null" for none)
    parents: tuple[str, ...] = ()
    mode: str = "fail"
    wp: int = 0
    pr: dict[str, str] = field(default_factory=dict)
    pf: str | None = None  # the parent whose failure failed or cancelled it (retry re-arms)
    # a node of a flow (create_flow.lua): its root's id (its parents above are its children)
    flow: str = ""

    @property
    def count_state(self) -> str:
        """The state the counts hash files it under: a cancelled job whose attempt still runs
        is counted as cancelled from the cancel on."""
        return self.state


@dataclass
class MCron:
    """A schedule firing every `every_s` seconds (a seconds-field cron in UTC)."""

    name: str
    every_s: int
    topic: str
    misfire: str
    max_attempts: int
    next: int
    last_run: int | None = None

    def next_after(self, ms: int) -> int:
        period = self.every_s * 1000
        return (ms // period + 1) * period


Event = dict[str, Any]
FlowShape = tuple[str, str | None, tuple[Any, ...]]  # (id, state, children's shapes)


@dataclass(frozen=True)
class FlowSpec:
    """One node of a flow as Scheduler.flow is given it: its children's ids, and what a
    child's failure does to it (on_child_failure)."""

    id: str
    topic: str
    due: int
    attempts: int
    backoff: tuple[str, int, int]
    children: tuple[str, ...]
    mode: str


@dataclass
class Model:
    """Every job and schedule of one namespace, and the outbox events not yet checked."""

    now: int
    jobs: dict[str, MJob] = field(default_factory=dict)
    crons: dict[str, MCron] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    leases_issued: int = 0  # leases are numbered in the order they are issued
    # parent id -> the ids of the children that waited for it when they were scheduled (a
    # deleted child stays listed, as in Redis: only a waiting child naming it counts)
    children: dict[str, set[str]] = field(default_factory=dict)
    # parent id -> the children its failure failed or cancelled (re-armed when it is retried)
    ended_by: dict[str, set[str]] = field(default_factory=dict)

    def _emit(self, e: str, job_id: str, a: int, **fields: Any) -> None:
        self.events.append(
            {
                "e": e,
                "id": job_id,
                "a": str(a),
                "ts": str(self.now),
                **{k: str(v) for k, v in fields.items()},
            }
        )

    # ------------------------------------------------------------ scheduling
    def schedule(
        self,
        job_id: str,
        topic: str,
        due: int,
        max_attempts: int,
        backoff: tuple[str, int, int],
        cron: str = "",
        after: tuple[str, ...] = (),
        mode: str = "fail",
        flow: str = "",
    ) -> bool | None:
        """enqueue.lua: None (UNKNOWN_PARENT, nothing written) when a parent of `after` does
        not exist, False (DUPLICATE, nothing written) when the id exists in any state.
        `flow`: the root of the flow create_flow.lua makes it a node of."""
        if any(p not in self.jobs for p in after):
            return None
        if job_id in self.jobs:
            return False
        state = FOR_PARENTS if after else "scheduled"
        job = MJob(job_id, topic, state, max_attempts, backoff, due, cron=cron, flow=flow)
        self.jobs[job_id] = job
        parents = json.dumps(list(after), separators=(",", ":")) if after else ""
        self._emit(
            "scheduled",
            job_id,
            0,
            topic=topic,
            due=due,
            max_attempts=max_attempts,
            cron=cron,
            parents=parents,
        )
        if after:
            self._link(job, after, mode)
        return True

    # ----------------------------------------------------------------- flows
    def create_flow(self, nodes: list[FlowSpec]) -> str | None:
        """create_flow.lua for a tree given children first, the root last: every node is a job
        scheduled after= its children (all new, so each waits for all of them), marked with the
        root's id. All or nothing: the first node (in that order) whose id exists is returned
        and nothing is written; None when every node was created."""
        for n in nodes:
            if n.id in self.jobs:
                return n.id
        root = nodes[-1].id
        for n in nodes:
            self.schedule(
                n.id,
                n.topic,
                n.due,
                n.attempts,
                n.backoff,
                after=n.children,
                mode=n.mode,
                flow=root,
            )
        return None

    def flow_tree(self, root: str) -> FlowShape | None:
        """What get_flow(root) shows: (id, state, children) per node, a node's children being
        the parents of its job when that job is a node of this flow (a job Redis no longer
        holds: state None, no children); None when the root's id is no job."""
        if root not in self.jobs:
            return None

        def shape(job_id: str) -> FlowShape:
            job = self.jobs.get(job_id)
            kids = job.parents if job is not None and job.flow == root else ()
            return (job_id, None if job is None else job.state, tuple(shape(c) for c in kids))

        return shape(root)

    # ---------------------------------------------------------- dependencies
    def _link(self, job: MJob, after: tuple[str, ...], mode: str) -> None:
        """deps_link: done parents count at once, a failed one applies `mode` at once."""
        job.parents, job.mode = after, mode
        failed = None
        for p in after:
            parent = self.jobs.get(p)  # (None: deleted since; only a re-armed child meets it)
            if parent is not None and parent.state == "completed":
                job.pr[p] = parent.result or "null"
            elif parent is None or parent.state in ("failed", "cancelled"):
                if mode == "ignore":
                    job.pr[p] = "null"
                elif failed is None:
                    failed = p
            else:
                job.wp += 1
                job.pr[p] = ""  # pending until p ends
                self.children.setdefault(p, set()).add(job.id)
        if failed is not None:
            self._end(job, failed)
        elif job.wp == 0:
            self._release(job)

    def _release(self, job: MJob) -> None:
        job.state, job.due = "scheduled", max(job.due, self.now)

    def _end(self, job: MJob, parent: str) -> None:
        job.pf = parent
        if parent in self.jobs:  # (a parent deleted before keeps no children set)
            self.ended_by.setdefault(parent, set()).add(job.id)
        if job.mode == "cancel":
            job.state = "cancelled"
            self._emit("cancelled", job.id, 0, running=0)
        else:
            job.state = "failed"
            self._emit("failed", job.id, 0, outcome="parent_failed")
            self._emit("schedule.failed", job.id, 0)

    def _parent_ended(self, parent: str, ok: bool, result: str) -> None:
        """deps_parent_ended: each child still waiting for `parent` (its result pending) counts
        it done or applies its mode; a child ending so is a failed parent in turn (children in
        id order)."""
        queue = [(parent, ok, result)]
        while queue:
            p, p_ok, p_result = queue.pop(0)
            for c in sorted(self.children.pop(p, set())):
                child = self.jobs.get(c)
                if child is None or child.state != FOR_PARENTS or child.pr.get(p) != "":
                    continue
                if p_ok or child.mode == "ignore":
                    child.pr[p] = (p_result or "null") if p_ok else "null"
                    child.wp -= 1
                    if child.wp <= 0:
                        self._release(child)
                else:
                    self._end(child, p)
                    queue.append((c, False, ""))

    def local_handoff(self, job_id: str, worker: str, lease_ms: int) -> str | None:
        """enqueue.lua with the caller's worker: a job due now, with no other job due, is
        leased at once; returns its token (None: queued as usual)."""
        job = self.jobs[job_id]
        if job.due > self.now or len(self.due_now()) != 1:
            return None
        return self._lease(job, worker, lease_ms)

    def due_now(self) -> list[MJob]:
        """Waiting jobs due at `now`, in the due set's order (score, then id)."""
        return sorted(
            (j for j in self.jobs.values() if j.state in WAITING and j.due <= self.now),
            key=lambda j: (j.due, j.id),
        )

    def _lease(self, job: MJob, worker: str, lease_ms: int) -> str:
        job.attempts += 1
        due = job.due
        # worker:attempt:n, n counting the namespace's leases from 1
        job.lease_no, self.leases_issued = self.leases_issued, self.leases_issued + 1
        job.state, job.token, job.lease = (
            "running",
            f"{worker}:{job.attempts}:{self.leases_issued}",
            self.now + lease_ms,
        )
        self._emit("attempt_started", job.id, job.attempts, worker=worker, due=due)
        return job.token

    # ------------------------------------------------------------- workers
    def claim(
        self, worker: str, limit: int, lease_ms: int
    ) -> tuple[list[tuple[str, int, str]], int | None]:
        """claim.lua: the first `limit` due jobs leased, and the earliest due time left."""
        taken = [
            (j.id, j.attempts + 1, self._lease(j, worker, lease_ms)) for j in self.due_now()[:limit]
        ]
        left = [j.due for j in self.jobs.values() if j.state in WAITING]
        return taken, (min(left) if left else None)

    def heartbeat(self, leases: list[tuple[str, int]], lease_ms: int) -> int:
        """extend_leases.lua for (job id, lease number) pairs: extends the leases still held;
        returns how many of the jobs another lease holds now."""
        lost = 0
        for job_id, lease_no in leases:
            job = self.jobs.get(job_id)
            if job is None:
                continue
            if job.token and job.lease_no == lease_no:
                job.lease = self.now + lease_ms
            elif job.token:
                lost += 1
        return lost

    def retry_at(self, job: MJob, attempt: int, do_not_retry: bool) -> int:
        """When attempt `attempt + 1` is due after attempt `attempt` failed (-1: none)."""
        if do_not_retry or attempt >= job.max_attempts:
            return -1
        kind, delay, cap = job.backoff
        wait = delay if kind == "fixed" else min(delay * 2 ** (attempt - 1), cap)
        return self.now + wait

    def complete(self, job_id: str, lease_no: int, worker: str, result: str = "") -> int:
        """complete.lua for the attempt of lease `lease_no`: COMPLETED 1, CANCELLED 2,
        LEASE_LOST -1 (a stale lease: the job is not held by it any more). `result`: the JSON
        its listeners returned ("" none), kept with the job and carried by its event (also
        when the job was cancelled meanwhile: the attempt's own result)."""
        job = self.jobs.get(job_id)
        if job is None or not job.token or job.lease_no != lease_no:
            return -1
        job.token, job.lease_no = "", -1
        if result:
            job.result = result
        if job.state == "cancelled":
            self._emit(
                "attempt_succeeded",
                job_id,
                job.attempts,
                worker=worker,
                outcome="succeeded",
                result=result,  # ("": the event has no result field)
            )
            return 2
        job.state = "completed"
        self._parent_ended(job_id, True, result)  # (releasing children writes no event)
        self._emit(
            "completed", job_id, job.attempts, worker=worker, outcome="succeeded", result=result
        )
        return 1

    def fail(
        self,
        job_id: str,
        lease_no: int,
        worker: str,
        outcome: str,
        retry_at: int,
        require_expired: bool = False,
    ) -> int:
        """fail.lua for the attempt of lease `lease_no`: RETRY_SCHEDULED 3, FAILED 4, CANCELLED 2,
        LEASE_LOST -1, LEASE_ALIVE -2 (recovery of a lease that was renewed)."""
        job = self.jobs.get(job_id)
        if job is None or not job.token or job.lease_no != lease_no:
            return -1
        if require_expired and job.lease > self.now:
            return -2
        job.token, job.lease_no = "", -1
        self._emit("attempt_failed", job_id, job.attempts, worker=worker, outcome=outcome)
        if job.state == "cancelled":
            return 2
        if retry_at >= 0:
            job.state, job.due = "retrying", retry_at
            self._emit("retry_scheduled", job_id, job.attempts, next_at=retry_at)
            return 3
        job.state = "failed"
        self._emit("failed", job_id, job.attempts, outcome="")  # (no outcome field)
        self._emit("schedule.failed", job_id, job.attempts)
        self._parent_ended(job_id, False, "")
        return 4

    def release(self, job_id: str, lease_no: int) -> int:
        """release.lua for one lease (a graceful stop): 1 when it still held the job, which
        then waits again, due now, its attempt not counted; else 0."""
        job = self.jobs.get(job_id)
        if job is None or not job.token or job.lease_no != lease_no:
            return 0
        worker = job.token.split(":")[0]
        self._emit("attempt_released", job_id, job.attempts, worker=worker)
        job.token, job.lease_no = "", -1
        if job.state != "cancelled":
            job.state, job.due = ("retrying" if job.attempts > 1 else "scheduled"), self.now
        job.attempts -= 1
        return 1

    def expired(self) -> list[MJob]:
        """Attempts whose lease has passed (recover_expired fails them as worker_lost)."""
        return sorted(
            (j for j in self.jobs.values() if j.token and j.lease <= self.now),
            key=lambda j: (j.lease, j.id),
        )

    # ------------------------------------------------------------ operators
    def cancel(self, job_id: str) -> int:
        """cancel.lua: CANCELLED 1, CANCELLED_RUNNING 2, NOT_FOUND -3, FINISHED -4."""
        job = self.jobs.get(job_id)
        if job is None:
            return -3
        if job.state in (*WAITING, FOR_PARENTS, "running"):
            self._parent_ended(job_id, False, "")  # (before its own event, as cancel.lua)
        if job.state in (*WAITING, FOR_PARENTS):
            job.state = "cancelled"
            self._emit("cancelled", job_id, job.attempts, running=0)
            return 1
        if job.state == "running":
            job.state = "cancelled"
            self._emit("cancelled", job_id, job.attempts, running=1)
            return 2
        return -4

    def retry(self, job_id: str) -> int:
        """retry_job.lua: RETRIED 1, NOT_FOUND -3, RUNNING -6, WRONG_STATE -7."""
        job = self.jobs.get(job_id)
        if job is None:
            return -3
        if job.state not in ("failed", "cancelled"):
            return -7
        if job.token:
            return -6
        self._emit("retried", job_id, job.attempts, **{"from": job.state, "due": self.now})
        job.state, job.attempts, job.due, job.pf = "scheduled", 0, self.now, None
        job.result = ""  # a new run: an earlier run's result is not its own
        self._rearm(job_id)
        return 1

    def _rearm(self, parent: str) -> None:
        """deps_rearm: each child the parent's failure ended (still so) waits again, linked to
        its parents as they stand now; one waiting again re-arms its own children in turn."""
        queue = [parent]
        while queue:
            p = queue.pop(0)
            for c in sorted(self.ended_by.pop(p, set())):
                child = self.jobs.get(c)
                if child is None or child.pf != p or child.state not in ("failed", "cancelled"):
                    continue
                self._emit("retried", c, child.attempts, **{"from": child.state, "due": child.due})
                child.state, child.pf, child.pr, child.wp = FOR_PARENTS, None, {}, 0
                self._link(child, child.parents, child.mode)
                if child.state == FOR_PARENTS:
                    queue.append(c)

    def delete(self, job_id: str) -> int:
        """delete_job.lua: DELETED 2 (the id is free again), NOT_FOUND -3, RUNNING -6."""
        job = self.jobs.get(job_id)
        if job is None:
            return -3
        if job.state == "running" or job.token:
            return -6
        self._parent_ended(job_id, False, "")  # (before its own event, as delete_job.lua)
        self.children.pop(job_id, None)
        self.ended_by.pop(job_id, None)
        self._emit("deleted", job_id, job.attempts, **{"from": job.state})
        del self.jobs[job_id]
        return 2

    # ----------------------------------------------------------------- cron
    def upsert_cron(
        self, name: str, every_s: int, topic: str, misfire: str, max_attempts: int
    ) -> int:
        """upsert_cron.lua: CREATED 1, RESCHEDULED 2 (expression changed), UPDATED 0 (next kept)."""
        old = self.crons.get(name)
        cron = MCron(name, every_s, topic, misfire, max_attempts, 0, old.last_run if old else None)
        if old is not None and old.every_s == every_s:
            cron.next = old.next
            code = 0
        else:
            cron.next = cron.next_after(self.now)
            code = 2 if old is not None else 1
        self.crons[name] = cron
        return code

    def fire(self, cap: int, grace_ms: int, backoff: tuple[str, int, int]) -> int:
        """fire_due_crons: each due schedule's ticks (by its misfire mode) become jobs once;
        its next fire moves past now. Returns the jobs created."""
        created = 0
        for cron in sorted(self.crons.values(), key=lambda c: (c.next, c.name)):
            if cron.next > self.now:
                continue
            ticks = [cron.next]
            if cron.misfire == "all":
                while len(ticks) < cap and cron.next_after(ticks[-1]) <= self.now:
                    ticks.append(cron.next_after(ticks[-1]))
            elif cron.misfire == "skip" and self.now - cron.next > grace_ms:
                recent = cron.next_after(self.now - grace_ms - 1)
                ticks = [recent] if recent <= self.now else []
            for tick in ticks:
                if self.schedule(
                    f"cron:{cron.name}:{tick}",
                    cron.topic,
                    tick,
                    cron.max_attempts,
                    backoff,
                    cron=cron.name,
                ):
                    created += 1
            if ticks:
                cron.last_run = ticks[-1]
            cron.next = cron.next_after(self.now)
        return created

    # ----------------------------------------------------------- invariants
    def counts(self) -> dict[str, int]:
        """The counts hash: <topic>|<state> -> jobs (zero entries left out)."""
        out: dict[str, int] = {}
        for j in self.jobs.values():
            name = f"{j.topic}|{j.count_state}"
            out[name] = out.get(name, 0) + 1
        return out

    def sets(self) -> dict[str, dict[str, int | None]]:
        """Which sorted set holds each job, with its score where the model knows it: due (due
        time), active (lease deadline), completed/failed/cancelled (finish time: not modelled)."""
        out: dict[str, dict[str, int | None]] = {
            "due": {},
            "active": {},
            "completed": {},
            "failed": {},
            "cancelled": {},
            "waiting_parents": {},
        }
        for j in self.jobs.values():
            if j.token:
                out["active"][j.id] = j.lease
            elif j.state in WAITING:
                out["due"][j.id] = j.due
            elif j.state == FOR_PARENTS:
                out["waiting_parents"][j.id] = None
            else:
                out[j.state][j.id] = None
        return out
