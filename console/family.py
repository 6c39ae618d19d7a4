"""A job's relatives as its page shows them: the flow it belongs to (Scheduler.get_flow, from
the root down, this job marked) or the jobs it was scheduled after (after=), each with its
state now. Bounded: a flow may hold 10,000 jobs, the page shows MAX_ROWS of them (the path
to this job always) and counts the rest; `horae jobs flow` and GET /api/v1/flows/{root_id}
have them all."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scheduler.api import Scheduler
from scheduler.core.flow_tree import FlowNode
from scheduler.core.job import JobInfo, JobState

MAX_ROWS = 200  # the flow's jobs one page lists
RESULT_CHARS = 48  # how much of a result's JSON a row shows (the job's page has it whole)
FORGOTTEN = "past retention"  # the badge of a job Redis no longer holds
# The order of the flow's counts: the ended jobs first, then those still to run.
STATE_ORDER = (
    "completed",
    "failed",
    "cancelled",
    "running",
    "retrying",
    "scheduled",
    "waiting_for_parents",
    FORGOTTEN,
)


@dataclass(frozen=True)
class FlowRow:
    """One job of the flow on the page, and under it the jobs it runs after."""

    id: str
    topic: str
    state: str  # FORGOTTEN when Redis no longer holds it
    result: str  # its result as short JSON; "" when none
    current: bool  # the job whose page this is
    waiting: str = ""  # waiting_for_parents: "1 of 2" (children it still waits for)
    children: tuple[FlowRow, ...] = ()
    hidden: int = 0  # jobs under it left out (MAX_ROWS)


@dataclass(frozen=True)
class Relative:
    """A job this one was scheduled after (after=), with its state now."""

    id: str
    state: str
    topic: str


@dataclass(frozen=True)
class Family:
    """What the job page shows of a job's relatives; empty for a job of neither kind."""

    root: str | None = None  # a flow node: its root's id
    tree: FlowRow | None = None  # None: Redis no longer holds the root
    total: int = 0  # the flow's jobs
    states: list[tuple[str, int]] = field(default_factory=list)  # its jobs per state, in order
    parents: list[Relative] = field(default_factory=list)  # an after= job's parents

    @property
    def hidden(self) -> int:
        """The flow's jobs the page leaves out."""
        return self.total - _shown(self.tree)


def short_json(value: Any, limit: int = RESULT_CHARS) -> str:
    """A value as one short line of JSON ("" for None)."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def family_of(scheduler: Scheduler, job_id: str, job: JobInfo | None) -> Family:
    """The flow of a flow node, or the parents of an after= job (from `job`, Redis's copy;
    a job Redis forgot has neither here: its page shows the audit's parents)."""
    if job is None:
        return Family()
    if job.flow is not None:
        tree = await scheduler.get_flow(job.flow)
        if tree is None:
            return Family(root=job.flow)
        states = Counter(FORGOTTEN if n.state is None else n.state.value for n in tree.nodes())
        return Family(
            root=job.flow,
            tree=rows(tree, job_id),
            total=sum(states.values()),
            states=[
                (s, states[s])
                for s in (*STATE_ORDER, *sorted(set(states) - set(STATE_ORDER)))
                if states[s]
            ],
        )
    if job.parents:
        found = await scheduler.store.get_jobs(list(job.parents))
        return Family(
            parents=[
                Relative(p, FORGOTTEN, "") if j is None else Relative(p, j.state.value, j.topic)
                for p, j in zip(job.parents, found, strict=True)
            ]
        )
    return Family()


def rows(root: FlowNode, current: str, cap: int = MAX_ROWS) -> FlowRow:
    """The tree as the page lists it: jobs in the flow's order until `cap` of them, then only
    the path to `current`; each row counts the jobs under it left out."""
    parent: dict[str, str] = {}
    for node in root.nodes():
        for child in node.children:
            parent[child.id] = node.id
    path = {current}
    at = current
    while at in parent:
        at = parent[at]
        path.add(at)
    budget = [cap]

    def build(node: FlowNode) -> FlowRow:
        budget[0] -= 1
        kids: list[FlowRow] = []
        hidden = 0
        for child in node.children:
            if budget[0] > 0 or child.id in path:
                kids.append(build(child))
            else:
                hidden += sum(1 for _ in child.nodes())
        return FlowRow(
            id=node.id,
            topic=node.topic or "",
            state=FORGOTTEN if node.state is None else node.state.value,
            result=short_json(node.result),
            current=node.id == current,
            waiting=_waiting(node.job),
            children=tuple(kids),
            hidden=hidden,
        )

    return build(root)


def _waiting(job: JobInfo | None) -> str:
    if job is None or job.state is not JobState.WAITING_FOR_PARENTS or not job.parents:
        return ""
    return f"{job.waiting_for} of {len(job.parents)}"


def _shown(row: FlowRow | None) -> int:
    if row is None:
        return 0
    return 1 + sum(_shown(child) for child in row.children)
