"""`Stats`: the jobs per state that `Scheduler.stats()` returns (per topic: `TopicStats`).

A `dict[str, int]` subclass, so every use of the bare dict these calls returned before keeps
working (`["scheduled"]`, `.get`, `==` with a dict, `json.dumps`, pydantic fields), while a
reader gets named, typed counts (`stats.scheduled`, `stats.total`). Its repr is the dict's,
so logs and messages read as before."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_values


class Stats(dict[str, int]):
    """Jobs per state currently held in Redis: one key per JobState value plus `dead_letter`."""

    @property
    def scheduled(self) -> int:
        return self.get("scheduled", 0)

    @property
    def waiting_for_parents(self) -> int:
        """Jobs scheduled with after= waiting for their parents (not due yet)."""
        return self.get("waiting_for_parents", 0)

    @property
    def running(self) -> int:
        return self.get("running", 0)

    @property
    def retrying(self) -> int:
        return self.get("retrying", 0)

    @property
    def completed(self) -> int:
        return self.get("completed", 0)

    @property
    def failed(self) -> int:
        return self.get("failed", 0)

    @property
    def cancelled(self) -> int:
        return self.get("cancelled", 0)

    @property
    def dead_letter(self) -> int:
        """Dead letters waiting in their queue (not counted in `scheduled`)."""
        return self.get("dead_letter", 0)

    @property
    def total(self) -> int:
        """Every job held, dead letters included."""
        return sum(self.values())


class TopicStats(dict[str, dict[str, int]]):
    """Stats per topic (`stats_by_topic()`): a `dict[str, dict[str, int]]`, as it was, whose values
    are Stats. Only the type checker is told so (a reading returns Stats); at run time every
    method is the dict's own."""

    if TYPE_CHECKING:

        def __getitem__(self, key: str, /) -> Stats: ...
        def values(self) -> dict_values[str, Stats]: ...
        def items(self) -> dict_items[str, Stats]: ...
