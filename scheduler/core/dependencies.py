"""Dependencies between jobs (`after=`, docs/how-to/dependencies.md): the checks of a job's
parents and of what a parent's failure does to it. Pure; enqueue.lua and the scripts that end
a job (lua/_deps.lua) keep the waiting children."""

from __future__ import annotations

from typing import Final, Literal

from listeners.triggers import MAX_NAME_LEN
from scheduler.core.errors import InvalidDependency, shown

ParentFailure = Literal["fail", "ignore", "cancel"]
# What a parent's failure (failed for good, cancelled or deleted) does to a waiting child.
PARENT_FAILURE_MODES: Final = ("fail", "ignore", "cancel")
DEFAULT_PARENT_FAILURE: Final = "fail"
# The most parents one job may wait for (each parent is one set member and one hash field).
MAX_PARENTS: Final = 10_000
MAX_PARENT_ID_LEN: Final = MAX_NAME_LEN  # a job id's bound (validation.MAX_ID_LEN)


def check_after(after: object) -> tuple[str, ...]:
    """The parents' ids of `after=`, in order, duplicates removed; () for None.

    Raises:
        InvalidDependency: not a list (or tuple) of non-empty job-id strings, or more than
            MAX_PARENTS of them.
    """
    if after is None:
        return ()
    if not isinstance(after, (list, tuple)):
        raise InvalidDependency(
            f"after must be a list of job ids (str); got {shown(after)}", field="after"
        )
    ids: dict[str, None] = {}
    for item in after:
        if not isinstance(item, str) or not item or len(item) > MAX_PARENT_ID_LEN:
            raise InvalidDependency(
                "after must hold job ids (non-empty strings of at most "
                f"{MAX_PARENT_ID_LEN} characters); got {shown(item)}",
                field="after",
            )
        ids[item] = None
    if len(ids) > MAX_PARENTS:
        raise InvalidDependency(
            f"after may name at most {MAX_PARENTS} parents; got {len(ids)}", field="after"
        )
    return tuple(ids)


def check_on_parent_failure(mode: object) -> str:
    """`on_parent_failure=`: one of PARENT_FAILURE_MODES (None: the default, "fail").

    Raises:
        InvalidDependency: naming the value and the allowed ones.
    """
    if mode is None:
        return DEFAULT_PARENT_FAILURE
    if mode not in PARENT_FAILURE_MODES:
        raise InvalidDependency(
            f"on_parent_failure must be one of {', '.join(PARENT_FAILURE_MODES)}; "
            f"got {shown(mode)}",
            field="on_parent_failure",
        )
    return str(mode)
