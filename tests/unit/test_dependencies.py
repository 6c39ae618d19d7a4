"""after= and on_parent_failure= are checked before anything is written, naming the field, the
value and what is allowed (scheduler/core/dependencies.py through validation.build_job)."""

from __future__ import annotations

import pytest

from scheduler.core.dependencies import MAX_PARENTS, check_after, check_on_parent_failure
from scheduler.core.errors import InvalidDependency, ScheduleError, UnknownParent
from scheduler.core.request import JobRequest
from scheduler.core.retry import RetryPolicy
from scheduler.core.validation import build_job


def job(**kw: object) -> object:
    return build_job(
        JobRequest(topic="t", **kw),  # type: ignore[arg-type]
        default_retry=RetryPolicy(),
        default_timeout_ms=1000,
    )


def test_parents_keep_their_order_without_duplicates() -> None:
    assert check_after(None) == ()
    assert check_after([]) == ()
    assert check_after(["b", "a", "b"]) == ("b", "a")
    assert check_after(("x",)) == ("x",)
    built = job(after=["p1", "p2", "p1"], on_parent_failure="ignore")
    assert built.after == ("p1", "p2") and built.on_parent_failure == "ignore"  # type: ignore[attr-defined]
    plain = job()
    assert plain.after == () and plain.on_parent_failure == "fail"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("after", "says"),
    [
        ("abc", "after must be a list of job ids"),
        ({"a": 1}, "after must be a list of job ids"),
        ([1], "after must hold job ids"),
        ([""], "after must hold job ids"),
        (["x" * 201], "after must hold job ids"),
        ([str(i) for i in range(MAX_PARENTS + 1)], f"at most {MAX_PARENTS} parents"),
    ],
)
def test_bad_after_is_refused_naming_the_field(after: object, says: str) -> None:
    with pytest.raises(InvalidDependency, match=says) as caught:
        job(after=after)
    assert caught.value.field == "after" and isinstance(caught.value, ScheduleError)


@pytest.mark.parametrize("mode", ["retry", "", 1, "FAIL"])
def test_bad_on_parent_failure_names_the_allowed_values(mode: object) -> None:
    with pytest.raises(InvalidDependency, match="fail, ignore, cancel") as caught:
        check_on_parent_failure(mode)
    assert caught.value.field == "on_parent_failure"


def test_unknown_parent_names_the_id() -> None:
    err = UnknownParent("p-42")
    assert err.parent_id == "p-42" and err.field == "after" and "'p-42'" in str(err)
    assert isinstance(err, LookupError) and err.code == "SCHEDULE_UNKNOWN_PARENT"
