"""`horae jobs flow ROOT_ID`: a flow (Scheduler.flow) as a tree, each job with its topic, state
and result, the root first and under each job the jobs it runs after; --json prints
FlowNode.as_dict, the document GET /api/v1/flows/{root_id} answers. Its own module (jobs.py is
long enough); registered by scheduler/cli/main.py into the `jobs` group."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from horae.settings import Settings
from scheduler.api import Scheduler
from scheduler.cli.common import echo_json, no_relay
from scheduler.core.flow_tree import FlowNode
from scheduler.core.job import JobInfo, JobState

Run = Callable[[Any], Any]
# How much of a node's result (its JSON) the tree shows; --json has it whole.
RESULT_CHARS = 40
STATE_STYLES = {
    JobState.COMPLETED: "green",
    JobState.FAILED: "red",
    JobState.RUNNING: "cyan",
    JobState.RETRYING: "yellow",
    JobState.CANCELLED: "magenta",
}


def short_result(value: Any, limit: int = RESULT_CHARS) -> str:
    """A result as one short line of JSON ("" for none): a tree row must stay one line."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def not_a_root(job: JobInfo, root_id: str) -> str:
    """Why `root_id` names no flow although the job exists: a plain job, or a node below a
    root (then the command to type instead)."""
    if job.flow is None:
        return f"job {root_id!r} is not part of a flow (it was not created by Scheduler.flow)"
    return (
        f"job {root_id!r} is a node of the flow whose root is {job.flow!r}: "
        f"horae jobs flow {job.flow}"
    )


def _label(node: FlowNode) -> Text:
    label = Text(node.id, style="bold")
    if node.job is None:
        return label.append("  (no longer in Redis: past retention)", style="dim")
    label.append(f"  {node.job.topic}  ")
    label.append(node.job.state.value, style=STATE_STYLES.get(node.job.state, ""))
    if node.job.state is JobState.WAITING_FOR_PARENTS and node.job.parents:
        label.append(f" ({node.job.waiting_for} of {len(node.job.parents)})", style="dim")
    result = short_result(node.result)
    if result:
        label.append(f"  → {result}")
    return label


def flow_tree(root: FlowNode) -> Tree:
    """The Rich tree of a flow: each node's children under it, in order (walked level by
    level without recursion, a chain being as deep as it is long)."""
    top = Tree(_label(root), guide_style="dim")
    queue: deque[tuple[FlowNode, Tree]] = deque([(root, top)])
    while queue:
        node, branch = queue.popleft()
        for child in node.children:
            queue.append((child, branch.add(_label(child))))
    return top


def register(cli: click.Group, run: Run, console: Console) -> None:
    """Add `flow` to the `jobs` group (scheduler/cli/jobs.py registers the group first)."""
    jobs = cli.commands["jobs"]
    assert isinstance(jobs, click.Group)

    @jobs.command("flow")
    @click.argument("root_id")
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='One JSON object {"id", "topic", "state", "result", "children": [...]}, each child '
        "the same (as GET /api/v1/flows/ROOT_ID).",
    )
    @click.pass_obj
    def jobs_flow(settings: Settings, root_id: str, as_json: bool) -> None:
        """A flow (Scheduler.flow) from its root ROOT_ID: each job with its topic, state and
        result (shortened), and under each job the jobs it runs after. A job Redis forgot (past
        retention) shows its id alone (`horae audit show ID` has its history)."""

        async def main() -> FlowNode | None:
            async with Scheduler(settings=no_relay(settings)) as s:
                return await s.get_flow(root_id)  # (its root's job says whether it is one)

        tree = run(main())
        job = None if tree is None else tree.job
        if tree is None or job is None or job.flow != root_id:
            if job is not None:
                raise click.ClickException(not_a_root(job, root_id))
            raise click.ClickException(
                f"no job {root_id!r} in namespace {settings.namespace!r} (the root of a flow is "
                "the id Scheduler.flow returned)"
            )
        if as_json:
            echo_json(tree.as_dict())
            return
        wide = Console(width=100_000, no_color=True, highlight=False)  # (piped: rows whole)
        out = console if console.is_terminal else wide
        out.print(flow_tree(tree))
        done = sum(1 for n in tree.nodes() if n.state is JobState.COMPLETED)
        total = sum(1 for _ in tree.nodes())
        click.echo(f"{done} of {total} jobs completed")
