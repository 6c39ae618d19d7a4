"""Flows (docs/how-to/dependencies.md): a tree of jobs created in one step, leaves first, each
node running once its children are done; and chain/group, the sugar built on it. Pure: the
facade (scheduler/facade/flows.py) builds the jobs, create_flow.lua stores them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from scheduler.core.errors import InvalidDependency, shown
from scheduler.core.job import JobInfo, JobState

# The keywords a node takes: schedule_at's (run_at and tz, or schedule_in's delay), except
# after= (a flow wires it: each node runs after its children) and dedupe= (a refusal could
# not leave the rest of the tree whole). on_child_failure is on_parent_failure seen from the
# tree: what a child's failure does to this node; schedule_at's name is accepted too.
NODE_KEYWORDS: Final = (
    "run_at",
    "delay",
    "tz",
    "retry",
    "metadata",
    "timeout",
    "job_id",
    "dead_letter",
    "key",
    "priority",
    "on_child_failure",
    "on_parent_failure",
)
# The most jobs one flow may hold (one script call writes them all), and its deepest level
# (a chain of 100 steps; the tree is walked, shown and sent as JSON by recursion).
MAX_FLOW_NODES: Final = 20_000
MAX_FLOW_DEPTH: Final = 100


class Flow:
    """One node of a flow: a job of `topic` that runs after every job of `children` completed
    (each a Flow, itself maybe with children), reading their results in
    `event.children_results`. `keywords` are schedule_at's (retry, timeout, metadata, key,
    priority, job_id, run_at/tz or delay, dead_letter), and on_child_failure: what a child's
    failure does to this node ("fail", the default: it fails with outcome parent_failed;
    "ignore"; "cancel").

    Raises:
        InvalidDependency: an unknown keyword, after= or dedupe=, or a child that is not a Flow.
    """

    __slots__ = ("topic", "payload", "children", "keywords")

    def __init__(
        self,
        topic: str,
        payload: Any = None,
        children: Iterable[Flow] | None = None,
        **keywords: Any,
    ) -> None:
        for name in keywords:
            if name in ("after", "dedupe"):
                raise InvalidDependency(
                    f"Flow does not take {name}= (a flow wires after= itself, and a dedupe "
                    "refusal could not leave the rest of the tree whole); allowed: "
                    + ", ".join(NODE_KEYWORDS),
                    field=name,
                )
            if name not in NODE_KEYWORDS:
                raise InvalidDependency(
                    f"Flow got an unknown keyword {shown(name)}; allowed: "
                    + ", ".join(NODE_KEYWORDS),
                    field=name,
                )
        if "on_child_failure" in keywords and "on_parent_failure" in keywords:
            if keywords["on_child_failure"] != keywords["on_parent_failure"]:
                raise InvalidDependency(
                    "give on_child_failure or on_parent_failure (the same setting), not both; "
                    f"got {shown(keywords['on_child_failure'])} and "
                    f"{shown(keywords['on_parent_failure'])}",
                    field="on_child_failure",
                )
        kids = tuple(children or ())
        for i, child in enumerate(kids):
            if not isinstance(child, Flow):
                raise InvalidDependency(
                    f"children[{i}] must be a Flow; got {shown(child)}", field=f"children[{i}]"
                )
        self.topic = topic
        self.payload = payload
        self.children: tuple[Flow, ...] = kids
        self.keywords: dict[str, Any] = dict(keywords)

    def __repr__(self) -> str:
        kids = f", children=[{len(self.children)}]" if self.children else ""
        return f"Flow({self.topic!r}{kids})"

    def with_child(self, child: Flow) -> Flow:
        """This node with one more child (a copy: a Flow may be shared by several trees)."""
        return Flow(self.topic, self.payload, (*self.children, child), **self.keywords)


def walk(root: Flow) -> Iterator[tuple[str, Flow, tuple[int, ...]]]:
    """Every node of the tree, children before their parent (the order the jobs are built and
    created in), with its path ("children[1].children[0]", "" for the root) and its children's
    positions in this order.

    Raises:
        InvalidDependency: more than MAX_FLOW_NODES nodes or MAX_FLOW_DEPTH levels, or a Flow
            that is its own descendant.
    """
    order: list[tuple[str, Flow, tuple[int, ...]]] = []
    on_path: set[int] = set()

    def visit(node: Flow, path: str) -> int:
        if id(node) in on_path:
            raise InvalidDependency(
                f"{path or 'the root'}: a flow cannot contain itself", field=path
            )
        if len(on_path) >= MAX_FLOW_DEPTH:
            raise InvalidDependency(
                f"a flow may be at most {MAX_FLOW_DEPTH} levels deep; {path} is deeper",
                field=path,
            )
        on_path.add(id(node))
        kids = tuple(
            visit(child, f"{path + '.' if path else ''}children[{i}]")
            for i, child in enumerate(node.children)
        )
        on_path.discard(id(node))
        if len(order) >= MAX_FLOW_NODES:
            raise InvalidDependency(
                f"a flow may hold at most {MAX_FLOW_NODES} jobs", field=path or "children"
            )
        order.append((path, node, kids))
        return len(order) - 1

    if not isinstance(root, Flow):
        raise InvalidDependency(f"flow must be a Flow; got {shown(root)}", field="flow")
    visit(root, "")
    return iter(order)


class Group:
    """Jobs that run side by side (Celery's group): `.then(callback)` makes the callback a
    parent of all of them (Celery's chord, BullMQ's flow of one parent)."""

    __slots__ = ("members",)

    def __init__(self, members: tuple[Flow, ...]) -> None:
        self.members = members

    def then(self, callback: Flow) -> Flow:
        """`callback` (a Flow) running once every member is done, with their results in
        `event.children_results`."""
        if not isinstance(callback, Flow):
            raise InvalidDependency(f"then() takes a Flow; got {shown(callback)}", field="callback")
        for member in self.members:
            callback = callback.with_child(member)
        return callback


def group(*members: Flow) -> Group:
    """Jobs run side by side; `group(a, b, c).then(report)` runs report after all three.

    Raises:
        InvalidDependency: no member, or one that is not a Flow.
    """
    if not members:
        raise InvalidDependency("group() needs at least one Flow", field="members")
    for i, member in enumerate(members):
        if not isinstance(member, Flow):
            raise InvalidDependency(
                f"group member {i} must be a Flow; got {shown(member)}", field=f"members[{i}]"
            )
    return Group(tuple(members))


def chain(*steps: Flow) -> Flow:
    """Each step after the previous one (Celery's chain): `chain(a, b, c)` runs a, then b
    (reading a's result in event.children_results), then c; the returned Flow is c's, the
    last step's (its id is what `await s.flow(chain(...))` returns).

    Raises:
        InvalidDependency: no step, or one that is not a Flow.
    """
    if not steps:
        raise InvalidDependency("chain() needs at least one Flow", field="steps")
    current: Flow | None = None
    for i, step in enumerate(steps):
        if not isinstance(step, Flow):
            raise InvalidDependency(
                f"chain step {i} must be a Flow; got {shown(step)}", field=f"steps[{i}]"
            )
        current = step if current is None else step.with_child(current)
    assert current is not None
    return current


@dataclass(frozen=True)
class FlowNode:
    """One job of a flow as it stands (Scheduler.get_flow): `job` None when Redis no longer
    holds it (its retention ended: the audit keeps its row and its parents)."""

    id: str
    job: JobInfo | None
    children: tuple[FlowNode, ...] = ()

    @property
    def state(self) -> JobState | None:
        """The job's state; None when Redis forgot it."""
        return None if self.job is None else self.job.state

    @property
    def topic(self) -> str | None:
        return None if self.job is None else self.job.topic

    @property
    def result(self) -> Any:
        """What its listeners returned (JobInfo.result); None when none or forgotten."""
        return None if self.job is None else self.job.result

    def nodes(self) -> Iterator[FlowNode]:
        """This node and every descendant, parents before children."""
        yield self
        for child in self.children:
            yield from child.nodes()

    def as_dict(self) -> Mapping[str, Any]:
        """The tree as JSON-ready data (the CLI, the console and the HTTP API)."""
        return {
            "id": self.id,
            "topic": self.topic,
            "state": None if self.state is None else self.state.value,
            "result": self.result,
            "children": [child.as_dict() for child in self.children],
        }
