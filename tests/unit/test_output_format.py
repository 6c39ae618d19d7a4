"""The one text of an instant (timeutil.rfc3339) and the one shape of an error record's traceback
(outbox.error_of without horae's dispatch frames, outbox.error_doc as lines)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from scheduler.cli.common import iso, to_json, when_text
from scheduler.core.outbox import error_doc, error_of
from scheduler.core.timeutil import rfc3339


def test_rfc3339_is_utc_with_milliseconds_and_z() -> None:
    berlin = timezone(timedelta(hours=1))
    assert (
        rfc3339(datetime(2026, 11, 27, 1, 45, 12, 20_999, tzinfo=berlin))
        == "2026-11-27T00:45:12.020Z"
    )
    assert rfc3339(datetime(2026, 11, 27, 0, 45, 12)) == "2026-11-27T00:45:12.000Z"  # naive: UTC
    assert rfc3339(None) is None and when_text(None) == "-"
    when = datetime(2026, 11, 27, 0, 45, 12, 973_000, tzinfo=UTC)
    assert iso(when) == when_text(when) == to_json({"at": when})["at"] == "2026-11-27T00:45:12.973Z"


def _raise_through(filename: str) -> Any:
    """A function whose frame claims to be in `filename`, calling its argument."""
    scope: dict[str, Any] = {}
    exec(compile("def call(fn):\n    return fn()\n", filename, "exec"), scope)
    return scope["call"]


def _listener() -> None:
    raise ValueError("the listener's own failure")


def test_error_of_leaves_out_horaes_dispatch_frames() -> None:
    dispatch = _raise_through("/srv/app/.venv/lib/python3.11/site-packages/listeners/dispatch.py")
    attempt = _raise_through(
        "/srv/app/.venv/lib/python3.11/site-packages/scheduler/worker/attempt.py"
    )
    try:
        attempt(lambda: dispatch(_listener))
    except ValueError as exc:
        exc.add_note(
            "raised in listener process 7:\nTraceback (most recent call last):\n"
            '  File "/x/scheduler/worker/process_child.py", line 150, in '
            "_run_one\n    result = fn(event)\n             ^^^^^^^^^\n  "
            'File "/x/app.py", line 3, in work\n    raise ValueError(1)\n'
            "ValueError: 1"
        )
        record = error_of(exc)
    text = record["traceback"]
    assert (
        "dispatch.py" not in text and "attempt.py" not in text and "process_child.py" not in text
    ), text
    assert "in _listener" in text and 'raise ValueError("the listener\'s own failure")' in text, (
        text
    )
    assert '/x/app.py", line 3, in work' in text and "raise ValueError(1)" in text, text
    doc = error_doc(record)
    assert doc is not None and doc["traceback"] == text.splitlines() and doc["type"] == "ValueError"
    assert error_doc(None) is None
