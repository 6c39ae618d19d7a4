"""Storing a flow (Scheduler.flow): the whole tree in one create_flow.lua call on the root's
partition, all or nothing, and reading it back (Scheduler.get_flow)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.core.errors import FlowRefused, InvalidDependency, KeyRequired
from scheduler.core.flow_tree import FlowNode
from scheduler.core.job import JobInfo, NewJob
from scheduler.core.keys import Keys
from scheduler.store.bulk import BulkStore
from scheduler.store.reads import ReadStore
from scheduler.store.scripts import FlowCode, ScriptCode


class FlowStore(BulkStore, ReadStore):
    """create_flow.lua's call, and the walk of a stored flow."""

    async def create_flow(self, jobs: Sequence[NewJob], paths: Sequence[str], now_ms: int) -> bool:
        """Store `jobs` (children before their parent, the root last; `paths[i]` names
        jobs[i] in errors) on the root's partition, or (its topic lives on one partition only)
        that one. False when the root's id exists already (nothing stored: the same flow
        created before, ids being idempotency keys).

        Raises:
            FlowRefused: another node's id exists, or a node's topic's policy keeps it out.
            KeyRequired: a node's topic's policy is key_strict_fifo and it has no key.
            InvalidDependency: a node's topic lives on another partition than the root's.
        """
        root = jobs[-1]
        k = self.keys if self.count == 1 else self.parts[self.partition_for(root)]
        reply = await self._create_on(k, jobs, now_ms)
        home = self._home_of(int(reply[1])) if int(reply[0]) == ScriptCode.WRONG_PARTITION else None
        # The refused node is of the root's topic (the root itself, or a child checked before
        # it: chain(a, b) of one topic): that topic is pinned, and the tree goes to its home.
        if home is not None and any(j.id == reply[2] and j.topic == root.topic for j in jobs):
            self.learn_home(root.topic, home)
            k = self.parts[home]
            reply = await self._create_on(k, jobs, now_ms)
        return self._created(reply, jobs, paths, k)

    async def _create_on(self, k: Keys, jobs: Sequence[NewJob], now_ms: int) -> list[Any]:
        args: list[object] = [now_ms, "" if k.partition is None else str(k.partition), jobs[-1].id]
        width = 0
        for job in jobs:
            _, values = self._enqueue_call(k, job, now_ms, "", 0)
            width = len(values)
            args += values
        args.insert(3, width)
        reply: list[Any] = await self._run("create_flow", [k.due, k.outbox, k.counts, k.wake], args)
        return reply

    def _created(
        self, reply: Sequence[Any], jobs: Sequence[NewJob], paths: Sequence[str], k: Keys
    ) -> bool:
        code = int(reply[0])
        if code == FlowCode.CREATED:
            return True
        node = str(reply[-1])
        index = next(i for i, job in enumerate(jobs) if job.id == node)
        path = paths[index] or "the root"
        field = f"{paths[index]}.job_id" if paths[index] else "job_id"
        if code == ScriptCode.DUPLICATE:
            if index == len(jobs) - 1:
                return False
            raise FlowRefused(
                f"{path}: a job with id {node!r} exists; nothing of the flow was created",
                field=field,
            )
        if code == ScriptCode.KEY_REQUIRED:
            raise KeyRequired(
                f"{path}: topic {jobs[index].topic!r} has policy key_strict_fifo: every job "
                "needs key=; got none (nothing of the flow was created)",
                field=f"{paths[index]}.key" if paths[index] else "key",
            )
        if code == ScriptCode.WRONG_PARTITION:
            raise InvalidDependency(
                f"{path}: topic {jobs[index].topic!r} lives on partition {reply[1]} only (a "
                f"topic-wide limit), the flow on partition {k.partition} (its root's): a flow "
                "lives on one partition (docs/how-to/dependencies.md); nothing was created",
                field=paths[index] or "flow",
            )
        holder, policy = str(reply[1]), str(reply[2])
        raise FlowRefused(
            f"{path}: topic {jobs[index].topic!r}'s policy {policy} keeps it out (job {holder!r} "
            f"holds the slot of key {jobs[index].key!r}); nothing of the flow was created",
            field=f"{paths[index]}.key" if paths[index] else "key",
        )

    async def get_flow(self, root_id: str) -> FlowNode | None:
        """The tree of the flow whose root is `root_id` as Redis holds it now, level by level
        (one read of a level's jobs); None when no such job is held. A node Redis forgot
        (retention) has job None and no children."""
        (root,) = await self.get_jobs([root_id])
        if root is None:
            return None
        infos: dict[str, JobInfo | None] = {root_id: root}
        level = [root]
        while level:
            wanted = [c for job in level if job.flow == root_id for c in job.parents]
            found = await self.get_jobs(wanted) if wanted else []
            infos.update(zip(wanted, found))
            level = [job for job in found if job is not None]

        return tree(root_id, infos)


def tree(root_id: str, infos: dict[str, JobInfo | None]) -> FlowNode:
    """The FlowNode of `root_id` from its jobs (`infos`), built bottom-up without recursion (a
    chain is as deep as it is long)."""

    def kids_of(job_id: str) -> tuple[str, ...]:
        job = infos.get(job_id)
        return job.parents if job is not None and job.flow == root_id else ()

    order, stack = [], [root_id]
    while stack:
        job_id = stack.pop()
        order.append(job_id)
        stack.extend(kids_of(job_id))
    built: dict[str, FlowNode] = {}
    for job_id in reversed(order):  # every node after its children
        built[job_id] = FlowNode(
            job_id, infos.get(job_id), tuple(built[c] for c in kids_of(job_id))
        )
    return built[root_id]
