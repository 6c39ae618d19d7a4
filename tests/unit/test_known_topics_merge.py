"""Known topics of a partitioned namespace: one row per topic per partition, merged (the latest
heartbeat names the worker, waiting jobs add up, the earliest due wins, served anywhere =
served)."""

from __future__ import annotations

from scheduler.core.timeutil import ms_to_utc
from scheduler.store.topic_memory import merge_rows


def test_rows_of_one_topic_on_several_partitions_merge_into_one() -> None:
    rows = [
        ["t", "2000|w-old|app-old", "0", "2", "5000"],
        ["t", "3000|w-new|app-new", "0", "1", "4000"],
        ["t", "1000|w-x|app-x", "0", "0", "-1"],
        ["s", "3000|w|app", "0", "0", "-1"],
        ["s", "3000|w|app", "9000", "0", "-1"],  # a live worker serves it on one partition
    ]
    s, t = merge_rows(rows)
    assert (t.topic, t.worker, t.app, t.last_served, t.served, t.waiting, t.waiting_since) == (
        "t",
        "w-new",
        "app-new",
        ms_to_utc(3000),
        False,
        3,
        ms_to_utc(4000),
    )
    assert (s.topic, s.served, s.waiting, s.waiting_since) == ("s", True, 0, None)
