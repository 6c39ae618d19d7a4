"""Log levels of a worker (issue 19): a job failed for good is one WARNING naming the
job, its topic and the error; a retried attempt stays at INFO; a success is DEBUG."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState
from scheduler.cli.main import cli
from scheduler.core.timeutil import ms_to_utc
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, in_state, make_scheduler
from tests.logging_guard import root_logging  # noqa: F401  (a fixture)


async def test_failure_for_good_warns_with_job_topic_and_error_success_is_debug(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)

    @reg.on_event("reports.export")
    async def export(event: ScheduleArrivedEvent) -> None:
        raise ValueError(f"template missing (attempt {event.attempt})")

    @reg.on_event("billing.remind")
    async def remind(event: ScheduleArrivedEvent) -> None:
        pass

    caplog.set_level(logging.DEBUG, logger="horae")
    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        at = ms_to_utc(START_MS)
        failing = await s.schedule_at(
            "reports.export", at, retry={"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}}
        )
        fine = await s.schedule_at("billing.remind", at)
        async with s.worker():
            await eventually(lambda: in_state(s, fine, JobState.COMPLETED), what="the success")
            await eventually(
                lambda: in_state(s, failing, JobState.RETRYING), what="the first failure"
            )
            clock.advance(1.0)
            await eventually(
                lambda: in_state(s, failing, JobState.FAILED), what="the failure for good"
            )

    about = {
        job: [r for r in caplog.records if getattr(r, "job_id", None) == job]
        for job in (failing, fine)
    }
    warnings = [r for r in about[failing] if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in about[failing]]
    warning = warnings[0]
    assert (warning.levelno, warning.event, warning.topic) == (
        logging.WARNING,
        "job_failed",
        "reports.export",
    )  # type: ignore[attr-defined]
    assert warning.getMessage() == (
        f"job {failing} (topic 'reports.export') failed after attempt 2: "
        "ValueError: template missing (attempt 2)"
    )
    retried = [r for r in about[failing] if r.event == "attempt_failed"]  # type: ignore[attr-defined]
    assert [r.levelno for r in retried] == [logging.INFO] and "attempt 1" in retried[0].getMessage()
    assert [(r.levelno, r.event) for r in about[fine]] == [(logging.DEBUG, "job_completed")]  # type: ignore[attr-defined]
    assert (
        about[fine][0].getMessage() == f"job {fine} (topic 'billing.remind') completed in attempt 1"
    )


@pytest.mark.usefixtures("root_logging")
@pytest.mark.parametrize("verbose", [False, True])
def test_the_servers_line_is_shown_with_v_only(
    redis_url: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verbose: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "HORAE_AUDIT__RELAY": "false",
    }
    args = ["-v"] * verbose + ["--redis-url", redis_url, "--namespace", namespace, "jobs", "stats"]

    result = CliRunner().invoke(cli, args, env=env)

    assert result.exit_code == 0, result.output
    assert ("horae.servers" in result.stderr) is verbose, result.stderr
