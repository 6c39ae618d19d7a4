"""Synthetic audit history for the analytics benchmark: jobs and attempts of
one UTC day, as pyarrow tables in the exported schema (audit/analytics/schema.py).

Each topic has its own failure probability per attempt (a few topics are bad),
jobs retry up to 3 attempts, failures are failed / timed_out / worker_lost with
messages that carry ids, numbers and quoted values (so the signature normalizer
has real work), 1% of jobs are cancelled, two topics have no listener.
Deterministic for a seed. Pure Python + pyarrow (no numpy).
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import pyarrow as pa

from audit.analytics.schema import ATTEMPTS, JOBS

MAX_ATTEMPTS = 3
ATTEMPTS_PER_JOB = 1.12  # the mean that the failure probabilities below give, near enough


def topics(n: int) -> list[str]:
    return [f"svc{i // 10:02d}.task{i % 10}" for i in range(n)]


def failure_probability(index: int) -> float:
    """Per-attempt failure probability of topic `index`: most healthy, every 17th bad."""
    return 0.35 if index % 17 == 3 else 0.01 + (index % 7) * 0.01


def _message(
    rng: random.Random, topic_index: int, outcome: str, attempt: int, job_id: str
) -> tuple[str, str]:
    if outcome == "timed_out":
        return "TimeoutError", f"attempt {attempt} timed out after {rng.choice((5, 30, 60))} s"
    if outcome == "worker_lost":
        return (
            "WorkerLost",
            f"worker host-{rng.randrange(16**6):06x}-{rng.randrange(99)} "
            f"lost its lease during attempt {attempt}",
        )
    kind = (topic_index + rng.randrange(3)) % 4
    if kind == 0:
        return (
            "CardDeclined",
            f"card {rng.randrange(10**4):04d} declined for invoice 'inv-{rng.randrange(10**6)}'",
        )
    if kind == 1:
        return (
            "ConnectionError",
            f"gateway 10.0.{rng.randrange(255)}.{rng.randrange(255)}:443 refused job {job_id}",
        )
    if kind == 2:
        return "KeyError", f"'field_{rng.randrange(40)}'"
    return (
        "ValueError",
        f"amount {rng.random() * 1000:.2f} exceeds limit "
        f"{rng.randrange(500)} for account {rng.randrange(10**9)}",
    )


def generate_day(
    day: date, attempts_target: int, topic_count: int, seed: int, spike: bool = False
) -> tuple[pa.Table, pa.Table]:
    """(jobs, attempts) of `day`: about `attempts_target` attempts, every job finished that day.

    spike: every 23rd topic fails half its attempts that day (the nightly then has alerts).
    """
    rng = random.Random(f"{seed}-{day.isoformat()}")
    names = topics(topic_count)
    probabilities = [
        0.5 if spike and i % 23 == 0 else failure_probability(i) for i in range(topic_count)
    ]
    midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
    jobs: dict[str, list[object]] = {name: [] for name in JOBS.names}
    att: dict[str, list[object]] = {name: [] for name in ATTEMPTS.names}
    n = 0
    made = 0
    prefix = day.strftime("%Y%m%d")
    while made < attempts_target:
        n += 1
        t = rng.randrange(topic_count)
        topic, p = names[t], probabilities[t]
        job_id = f"{prefix}{n:09x}{rng.randrange(16**6):06x}"
        # spread over the day, leaving room for retries before midnight
        created = midnight + timedelta(milliseconds=rng.randrange(86_400_000 - 900_000))
        due = created + timedelta(milliseconds=rng.randrange(60_000))
        failures = 0
        status = "completed"
        last_type = last_message = None
        cancelled = rng.random() < 0.01
        no_listener = t in (5, 6)
        number = 0
        for number in range(1, MAX_ATTEMPTS + 1):
            lateness = int(rng.expovariate(1 / 40))
            duration = int(rng.lognormvariate(4.0, 1.0))
            started = due + timedelta(milliseconds=lateness)
            finished = started + timedelta(milliseconds=duration)
            failed = not no_listener and rng.random() < p
            outcome = (
                ("no_listener" if no_listener else "succeeded")
                if not failed
                else rng.choices(("failed", "timed_out", "worker_lost"), (0.8, 0.15, 0.05))[0]
            )
            error_type = error_message = None
            if failed:
                failures += 1
                error_type, error_message = _message(rng, t, outcome, number, job_id)
                last_type, last_message = error_type, error_message
            for name, value in (
                ("job_id", job_id),
                ("attempt_no", number),
                ("topic", topic),
                ("worker_id", "w1"),
                ("started_at", started),
                ("finished_at", finished),
                ("outcome", outcome),
                ("error_type", error_type),
                ("error_message", error_message),
                ("duration_ms", duration),
                ("lateness_ms", lateness),
                ("job_created_at", created),
            ):
                att[name].append(value)
            made += 1
            due = finished + timedelta(seconds=30 * 2 ** (number - 1))
            if not failed or cancelled:
                break
        else:
            status = "failed"
        if cancelled:
            status = "cancelled"
        end = finished + timedelta(milliseconds=1)
        for name, value in (
            ("job_id", job_id),
            ("topic", topic),
            ("status", status),
            ("attempts", number),
            ("max_attempts", MAX_ATTEMPTS),
            ("failed_attempts", failures),
            ("created_at", created),
            ("run_at", created),
            ("finished_at", end),
            ("last_error_type", last_type),
            ("last_error_message", last_message),
            ("cron_name", None),
        ):
            jobs[name].append(value)
    return (pa.Table.from_pydict(jobs, schema=JOBS), pa.Table.from_pydict(att, schema=ATTEMPTS))
