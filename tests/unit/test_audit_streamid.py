"""Stream id arithmetic and the trim point behind consumer groups."""

from __future__ import annotations

import pytest

from audit.relay.streamid import GroupPosition, format_id, next_id, parse_id, trim_point


def test_ids_compare_numerically() -> None:
    assert parse_id("1700000000000-10") > parse_id("1700000000000-9")
    assert parse_id("5") == (5, 0)
    assert format_id(next_id(parse_id("7-3"))) == "7-4"
    with pytest.raises(ValueError):
        parse_id("x-1")


def test_no_group_means_no_trim() -> None:
    assert trim_point([]) is None


def test_a_group_without_pending_is_done_up_to_its_last_delivered_id() -> None:
    assert trim_point([GroupPosition("audit", (10, 2), 0, None)]) == (10, 3)


def test_a_pending_entry_is_kept() -> None:
    assert trim_point([GroupPosition("audit", (10, 2), 3, (8, 0))]) == (8, 0)


def test_the_slowest_group_decides() -> None:
    groups = [
        GroupPosition("audit", (20, 0), 0, None),
        GroupPosition("metrics", (12, 5), 1, (11, 0)),
        GroupPosition("other", (15, 0), 0, None),
    ]
    assert trim_point(groups) == (11, 0)


def test_unknown_first_pending_is_conservative() -> None:
    assert trim_point([GroupPosition("audit", (20, 0), 2, None)]) is None


def test_a_group_that_read_nothing_blocks_trimming() -> None:
    assert trim_point([GroupPosition("audit", (0, 0), 0, None)]) is None
