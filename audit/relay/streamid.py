"""Redis stream ids as comparable values, and the trim point behind consumer
groups. Pure functions: no Redis here, so the arithmetic is unit-tested."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

StreamId = tuple[int, int]


def parse_id(value: str) -> StreamId:
    """`"1700000000000-3"` -> (1700000000000, 3); a bare ms means seq 0.

    Raises:
        ValueError: for anything else.
    """
    ms, sep, seq = value.partition("-")
    return int(ms), int(seq) if sep else 0


def format_id(sid: StreamId) -> str:
    """(ms, seq) -> `"ms-seq"`."""
    return f"{sid[0]}-{sid[1]}"


def next_id(sid: StreamId) -> StreamId:
    """The smallest id greater than `sid`."""
    return sid[0], sid[1] + 1


@dataclass(frozen=True)
class GroupPosition:
    """What trimming needs of one consumer group."""

    name: str
    last_delivered: StreamId
    pending: int
    first_pending: StreamId | None


def trim_point(groups: Iterable[GroupPosition]) -> StreamId | None:
    """The MINID below which every group is done with the stream, or None.

    A group with pending entries still needs its oldest pending entry; a group
    without needs nothing up to its last-delivered id. XTRIM MINID removes ids
    strictly below the result. With no group at all nothing is trimmed: no
    consumer has said what it is done with.
    """
    points: list[StreamId] = []
    for group in groups:
        if group.pending > 0 and group.first_pending is not None:
            points.append(min(group.first_pending, next_id(group.last_delivered)))
        elif group.pending > 0:
            return None  # pending without a known first id: be conservative
        else:
            points.append(next_id(group.last_delivered))
    if not points:
        return None
    point = min(points)
    return None if point <= (0, 1) else point
