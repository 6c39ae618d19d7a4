"""Stats and TopicStats, what stats() and stats_by_topic() return: the bare dicts they returned
before (every use of those keeps working) with the counts named and typed."""

from __future__ import annotations

import copy
import json
import pickle

from pydantic import BaseModel

from scheduler.core.stats import Stats, TopicStats
from scheduler.store.reads import COUNT_KEYS

COUNTS = {**dict.fromkeys(COUNT_KEYS, 0), "scheduled": 3, "failed": 1, "dead_letter": 2}


def test_stats_is_the_dict_it_was_with_named_counts() -> None:
    stats = Stats(COUNTS)
    assert stats == COUNTS and COUNTS == stats and list(stats) == list(COUNTS)
    assert stats["scheduled"] == stats.get("scheduled") == stats.scheduled == 3
    assert (stats.running, stats.retrying, stats.completed, stats.cancelled) == (0, 0, 0, 0)
    assert (stats.failed, stats.dead_letter, stats.total) == (1, 2, 6)
    assert repr(stats) == repr(COUNTS) and str(stats) == str(COUNTS)
    assert json.dumps(stats) == json.dumps(COUNTS)
    assert pickle.loads(pickle.dumps(stats)) == stats and copy.deepcopy(stats) == stats
    assert {**stats} == COUNTS and dict(stats) == COUNTS


def test_a_missing_state_counts_zero() -> None:
    assert Stats().scheduled == 0 and Stats().total == 0


class _Out(BaseModel):  # as the console API's StatsOut declares them
    totals: dict[str, int]
    topics: dict[str, dict[str, int]]


def test_topic_stats_is_a_dict_of_stats_that_models_and_json_take() -> None:
    by_topic = TopicStats({"a": Stats(COUNTS)})
    assert isinstance(by_topic["a"], Stats) and by_topic["a"].scheduled == 3
    assert by_topic == {"a": COUNTS} and json.loads(json.dumps(by_topic)) == {"a": COUNTS}
    assert [s.total for s in by_topic.values()] == [6]
    assert [(t, s.failed) for t, s in by_topic.items()] == [("a", 1)]
    out = _Out(totals=Stats(COUNTS), topics=by_topic)
    assert out.model_dump() == {"totals": COUNTS, "topics": {"a": COUNTS}}
