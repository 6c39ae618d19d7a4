"""Where a partition migration puts each thing (scheduler/ops/migration_plan.py): the tags of both
layouts, flow-key names parsed back, targets of jobs, schedules and per-key structures, and the
ops that move a job."""

from __future__ import annotations

from scheduler.core.keys import Keys
from scheduler.ops.migration_plan import (
    Router,
    all_tags,
    flow_key,
    glob_escape,
    job_ops,
    leftover_key,
    parse_flow,
    schedule_ops,
    tags,
)
from scheduler.store.partitions import job_routing, partition_of, topic_home, topic_wide_limit


def test_the_tags_of_both_layouts_each_once_old_first() -> None:
    assert [k.prefix for k in tags("ns", 1)] == ["{ns}:"]
    assert [k.prefix for k in all_tags("ns", 1, 3)] == ["{ns}:", "{ns|0}:", "{ns|1}:", "{ns|2}:"]
    assert [k.prefix for k in all_tags("ns", 4, 2)] == ["{ns|0}:", "{ns|1}:", "{ns|2}:", "{ns|3}:"]


def test_a_flow_key_name_parses_back_even_with_colons_in_topic_and_key() -> None:
    tag = Keys("ns", 2)
    name = flow_key(tag, "dd", "a:b", "x:y:z")
    assert name == "{ns|2}:dd:3:a:b:x:y:z"
    parsed = parse_flow(name[len(tag.prefix) :])
    assert parsed is not None and (parsed.kind, parsed.topic, parsed.key) == ("dd", "a:b", "x:y:z")
    assert (
        parse_flow("dd:9:short:") is None
        and parse_flow("due:p:5") is None
        and parse_flow("j:abc") is None
    )


def test_jobs_go_by_home_then_key_then_dedupe_then_id() -> None:
    r = Router(6, {"pinned"})
    assert r.job("id1", {"topic": "pinned", "key": "k"}) == topic_home("pinned", 6)
    assert r.job("id1", {"topic": "t", "key": "k", "dd": "d"}) == partition_of("k", 6)
    assert r.job("id1", {"topic": "t", "dd": "d"}) == partition_of("d", 6)
    assert r.job("id1", {"topic": "t"}, dedupe="w") == partition_of(
        "w", 6
    )  # a windowed dedupe key it holds
    assert r.job("id1", {"topic": "t"}) == partition_of(job_routing("id1"), 6)
    assert r.schedule("nightly", "pinned") == topic_home("pinned", 6)
    assert r.schedule("nightly", "t") == partition_of("nightly", 6)
    assert Router(1, {"pinned"}).job("x", {"topic": "pinned"}) == 0


def test_topic_wide_limits_pin_a_topic_per_key_rate_limits_do_not() -> None:
    assert topic_wide_limit({"concurrency": "2"}) and topic_wide_limit(
        {"rl_max": "5", "rl_per": "1000"}
    )
    assert not topic_wide_limit({"rl_max": "5", "rl_key": "1"}) and not topic_wide_limit(
        {"policy": "short"}
    )


def test_a_parked_dead_lettered_prioritised_job_moves_with_its_marks() -> None:
    src, dst = Keys("ns", 0), Keys("ns", 1)
    scores = {src.prefix + "pk:t": "5", src.due + ":p:3": "7", src.dead_letters("t"): "9"}
    marks = [
        ("h", flow_key(src, "ks", "t", "k"), "w"),
        ("x", flow_key(src, "dd", "t", "d"), "1500"),
    ]
    copy, drop = job_ops(src, dst, "j1", {"topic": "t"}, scores, marks)
    assert (dst.prefix + "pk:t", ["z", "5", "j1"]) in copy and (
        dst.prefix + "unpark",
        ["u", "0", "t"],
    ) in copy
    assert (dst.due + ":levels", ["z", "3", "3"]) in copy and (
        dst.dead_letter_topics,
        ["s", "t", ""],
    ) in copy
    assert (flow_key(dst, "ks", "t", "k"), ["h", "w", "j1"]) in copy
    assert (flow_key(dst, "dd", "t", "d"), ["x", "j1", "1500"]) in copy
    assert all(k.startswith(dst.prefix) for k, _ in copy) and all(
        k.startswith(src.prefix) for k, _ in drop
    )
    assert (
        src.prefix + "unpark",
        ["z", "", "t"],
    ) not in drop  # other parked jobs of the topic keep their mark
    assert (flow_key(src, "dd", "t", "d"), ["x", "j1", ""]) in drop


def test_a_paused_schedule_is_not_made_active() -> None:
    copy, drop = schedule_ops(Keys("ns"), Keys("ns", 2), "n", None, True)
    assert [k for k, _ in copy] == ["{ns|2}:cron_names", "{ns|2}:crons_declared"]
    assert [k for k, _ in drop] == ["{ns}:cron_names", "{ns}:crons_declared"]


def test_only_the_namespaces_own_kinds_are_cleared_and_patterns_are_literal() -> None:
    assert (
        leftover_key("counts")
        and leftover_key("topic:x")
        and leftover_key("rl:1:t:")
        and leftover_key("dlq:t")
    )
    assert (
        not leftover_key("meta") and not leftover_key("migrate_lock") and not leftover_key("test:x")
    )
    assert glob_escape("{a*b?[c]}:") == "{a\\*b\\?\\[c\\]}:"
