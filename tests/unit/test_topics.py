"""TopicOptions: only dead_letter is implemented; any other field off its default is refused
naming the field; names are checked like topics and a topic cannot dead-letter to itself."""

from __future__ import annotations

from dataclasses import fields

import pytest

from scheduler import InvalidTopic, TopicOptions
from scheduler.topics import UnsupportedTopicOption, _decode_cursor, _encode_cursor, check_topic_options


def test_the_eight_fields() -> None:
    assert [f.name for f in fields(TopicOptions)] == [
        "policy", "retry", "timeout", "rate_limit", "concurrency", "priority_default", "warning_size", "dead_letter"]


@pytest.mark.parametrize("field, value", [
    ("policy", "fifo"), ("retry", {"attempts": 3}), ("timeout", 30), ("rate_limit", "10/s"), ("concurrency", 2),
    ("priority_default", 1), ("warning_size", 1_000),
])
def test_fields_not_supported_yet_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(UnsupportedTopicOption, match=f"TopicOptions.{field}=.*not supported yet") as err:
        check_topic_options("pay", TopicOptions(**{field: value}))  # type: ignore[arg-type]
    assert err.value.field == field


def test_dead_letter_is_stored_and_checked() -> None:
    assert check_topic_options("pay", TopicOptions(dead_letter="pay.dlq")) == {"policy": "standard",
                                                                                "dead_letter": "pay.dlq"}
    assert check_topic_options("pay", TopicOptions()) == {"policy": "standard"}
    with pytest.raises(InvalidTopic, match="own dead-letter"):
        check_topic_options("pay", TopicOptions(dead_letter="pay"))
    with pytest.raises(InvalidTopic):
        check_topic_options("pay", TopicOptions(dead_letter=""))
    with pytest.raises(InvalidTopic):
        check_topic_options("schedule.failed", TopicOptions())


def test_cursor_round_trips() -> None:
    assert _decode_cursor(_encode_cursor(1_800_000_000_000, "abc.def")) == (1_800_000_000_000, "abc.def")


def test_dead_letter_args_only_for_a_terminal_failure_with_the_message_cut_to_256() -> None:
    from scheduler.job import Settlement, dead_letter_args
    from scheduler.outbox import error_record

    error = error_record("ValueError", "é" * 1_000)
    assert dead_letter_args(Settlement("j", "t", "failed", error, retry_at_ms=5)) == ("", "", "")
    dl_id, kind, message = dead_letter_args(Settlement("j", "t", "failed", error))
    assert len(dl_id) == 16 and kind == "ValueError" and message == "é" * 256
