"""The flow calls of the Scheduler facade (flow, get_flow): every node checked and built into
a job first (errors name the node), then the whole tree stored in one step
(RedisStore.create_flow) under one PRODUCER span."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from scheduler.core.errors import FlowRefused, ScheduleError
from scheduler.core.flow_tree import Flow, FlowNode, walk
from scheduler.core.job import NewJob
from scheduler.core.validation import check_job_ref
from scheduler.facade.bulk import item_request
from scheduler.observe.tracing import current_traceparent, is_noop, producer_span

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from scheduler.core.clock import Clock
    from scheduler.facade.scheduling import Scheduling
    from scheduler.observe.metrics import Metrics
    from scheduler.store.redis import RedisStore


class FlowCalls:
    """Mixed into Scheduler, which provides the attributes below."""

    if TYPE_CHECKING:
        tracer: Tracer
        metrics: Metrics

        @property
        def _scheduling(self) -> Scheduling: ...
        @property
        def clock(self) -> Clock: ...
        @property
        def store(self) -> RedisStore: ...

    async def flow(self, flow: Flow) -> str:
        """Create a tree of jobs in one step, all or nothing: the leaves are due at their
        run_at; each other node waits (waiting_for_parents) until all its children completed,
        then runs with their results in event.children_results. What a child's failure does to
        its parent is the parent's on_child_failure ("fail", the default, fails it too, up to
        the root). The tree lives on its root's partition (docs/how-to/dependencies.md).

        Returns:
            The root's id (with the root's job_id given and taken: that id, nothing stored).

        Raises:
            ScheduleError: a subclass, its field naming the node ("children[2].retry");
                FlowRefused: a node's job_id exists, or its topic's policy keeps it out;
                nothing of the flow is stored.
        """
        now = self.clock.now_ms()
        jobs, paths = self._build_flow(flow, now)
        span: AbstractContextManager[Span | None] = (
            nullcontext()
            if is_noop(self.tracer)
            else producer_span(self.tracer, jobs[-1].topic, "send")
        )
        with span:
            trace = current_traceparent()
            if trace:
                jobs = [job.with_trace(trace) for job in jobs]
            created = await self.store.create_flow(jobs, paths, now)
        if created:
            for job in jobs:
                self.metrics.scheduled.add(1, {"topic": job.topic})
        return jobs[-1].id

    def _build_flow(self, flow: Flow, now_ms: int) -> tuple[list[NewJob], list[str]]:
        """Every node as a job, children before their parent (the root last), and each node's
        path for errors."""
        jobs: list[NewJob] = []
        paths: list[str] = []
        first: dict[str, str] = {}  # a job id -> the path of the node that has it
        for path, node, kids in walk(flow):
            item: dict[str, Any] = {"topic": node.topic, "payload": node.payload}
            for name, value in node.keywords.items():
                item["on_parent_failure" if name == "on_child_failure" else name] = value
            if kids:
                item["after"] = [jobs[i].id for i in kids]
            try:
                job = self._scheduling.build_job(item_request(item, now_ms), now_ms=now_ms)
            except ScheduleError as exc:
                raise _at(path, exc) from exc
            other = first.setdefault(job.id, path)
            if other != path:
                raise FlowRefused(
                    f"{path or 'the root'}: job_id {job.id!r} is also {other or 'the root'}'s",
                    field=f"{path}.job_id" if path else "job_id",
                )
            jobs.append(job)
            paths.append(path)
        return jobs, paths

    async def get_flow(self, root_id: str) -> FlowNode | None:
        """The flow whose root is `root_id` as it stands: each node's job (its state, result,
        attempts) and children; None when Redis holds no such job. A node forgotten by its
        retention has `job` None (the audit keeps its row and parents)."""
        return await self.store.get_flow(check_job_ref(root_id, "root_id"))


def _at(path: str, exc: ScheduleError) -> ScheduleError:
    """The same error class, its field and message prefixed with the node's path."""
    if not path:
        return exc
    field = f"{path}.{exc.field}" if exc.field else path
    return type(exc)(f"{path}: {exc}", field=field)
