"""The JSON form of a flow (`GET /api/v1/flows/{root_id}`): FlowNode.as_dict, the document
`horae jobs flow ROOT_ID --json` prints, as a model of its own for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from scheduler.core.flow_tree import FlowNode
from scheduler.core.job import JobInfo


class FlowNodeOut(BaseModel):
    """One job of a flow and, under it, the jobs it runs after (its children)."""

    id: str
    topic: str | None = Field(description="null: Redis no longer holds the job (past retention)")
    state: str | None = Field(
        description="its state now (waiting_for_parents until its children completed); null: "
        "Redis no longer holds it (GET /api/v1/jobs/{job_id} has the audit's record)"
    )
    result: Any = Field(
        None, description="what its listeners returned when it completed (JSON); null: nothing"
    )
    children: list[FlowNodeOut] = Field(
        description="the jobs it runs after, each a node like this one; empty: a leaf"
    )

    @classmethod
    def of(cls, node: FlowNode) -> FlowNodeOut:
        """The tree as the API answers it (validated from FlowNode.as_dict: one shape)."""
        return cls.model_validate(node.as_dict())


def not_a_root(job: JobInfo | None, root_id: str) -> str:
    """Why `root_id` names no flow (a 404's message): no such job, a job of no flow, or a node
    below its root (then the root's path)."""
    if job is None:
        return f"no job {root_id!r} in Redis: the root of a flow is the id creating it returned"
    if job.flow is None:
        return f"job {root_id!r} is not part of a flow (it was not created as one)"
    return (
        f"job {root_id!r} is a node of the flow whose root is {job.flow!r}: "
        f"GET /api/v1/flows/{job.flow}"
    )
