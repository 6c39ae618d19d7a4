"""Generated job ids: short, base62, random."""

from __future__ import annotations

import string

from scheduler.core.job import new_job_id


def test_generated_ids_are_16_base62_characters_and_distinct() -> None:
    ids = [new_job_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 16 and set(i) <= set(string.digits + string.ascii_letters) for i in ids)


def test_every_character_is_equally_likely() -> None:
    counts: dict[str, int] = {}
    for _ in range(20_000):
        for ch in new_job_id():
            counts[ch] = counts.get(ch, 0) + 1
    mean = 20_000 * 16 / 62  # ~5,161 per character
    assert len(counts) == 62
    assert all(abs(n - mean) < 0.1 * mean for n in counts.values()), (
        counts
    )  # ~7 standard deviations


def test_with_trace_is_replace_without_its_cost() -> None:
    """NewJob.with_trace: the same job as dataclasses.replace(job, trace=...) gives, a new
    object, and the original untouched (it is frozen and may be shared)."""
    from dataclasses import replace

    from scheduler.core.job import NewJob

    job = NewJob(
        "j1",
        "t",
        5,
        5,
        "Europe/Berlin",
        '{"a":1}',
        "",
        3,
        "fixed",
        1000,
        2000,
        "none",
        60_000,
        key="k",
        priority="2",
        dedupe_key="d",
        retry_given=False,
    )
    traced = job.with_trace("00-" + "a" * 32 + "-" + "b" * 16 + "-01")
    assert traced == replace(job, trace=traced.trace) and traced is not job
    assert job.trace == "" and traced.key == "k" and traced.retry_given is False
