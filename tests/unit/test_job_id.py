"""Generated job ids: short, base62, random."""

from __future__ import annotations

import string

from scheduler.job import new_job_id


def test_generated_ids_are_16_base62_characters_and_distinct() -> None:
    ids = [new_job_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 16 and set(i) <= set(string.digits + string.ascii_letters) for i in ids)
