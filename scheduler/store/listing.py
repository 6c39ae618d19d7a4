"""Job listing (Scheduler.jobs): the request checks, the opaque page cursor and
the walk over the state sorted sets (lua/list_jobs.lua), a bounded amount of
work per page. No index beyond the sets the engine keeps anyway."""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from datetime import datetime

from listeners.shown import shown
from scheduler.core.errors import ScheduleError
from scheduler.core.job import JobState
from scheduler.core.timeutil import utc_to_ms
from scheduler.core.validation import check_topic

MAX_LIMIT = 1000
# Members examined per page at most, as a multiple of the page size: a filter that
# matches few jobs returns a short (even empty) page with a cursor instead of
# walking the whole set in one call.
WORK_PER_ITEM = 10

# The sets a listing walks, in order, named by tokens (a cursor holds its set's token):
# waiting jobs first ("p:<n>" a priority above 0, highest first; "due", priority 0;
# "p:<n>" below 0; "pk:<topic>" jobs a limit parked), then "waiting_for_parents" (jobs
# scheduled with after=, not due until their parents are done), "active", "completed",
# "failed", "cancelled". Priority levels and parked topics come and go, so a cursor
# names its set, not a place in a list.
GROUPS = ("waiting", "waiting_for_parents", "active", "completed", "failed", "cancelled")
GROUP_OF_STATE = {
    JobState.SCHEDULED: "waiting",
    JobState.WAITING_FOR_PARENTS: "waiting_for_parents",
    JobState.RETRYING: "waiting",
    JobState.RUNNING: "active",
    JobState.COMPLETED: "completed",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
}
# States whose set holds other states too, so each member's state field is read:
# scheduled and retrying share the due set; a job cancelled while its attempt runs
# stays in the active set (state cancelled) until the attempt settles.
FILTERED_STATES = frozenset({JobState.SCHEDULED, JobState.RETRYING, JobState.RUNNING})


def set_order(token: str) -> tuple[int, int, str]:
    """Where a set comes in a walk (see GROUPS); ValueError for a token no walk has."""
    if token == "due":
        return (0, 0, "")
    if token.startswith("p:"):
        return (0, -int(token[2:]), "")
    if token.startswith("pk:") and len(token) > 3:
        return (1, 0, token[3:])
    return (GROUPS.index(token) + 1, 0, "")


def group_of(token: str) -> str:
    """The group ("waiting", "active", ...) of a set token."""
    return "waiting" if token == "due" or token.startswith(("p:", "pk:")) else token


def partition_token(token: str) -> tuple[int | None, str]:
    """A partitioned namespace's cursor token "<partition>|<set token>" (RedisStore.list_job_ids)
    as (partition, set token; "" = the partition's start); (None, token) for a plain one."""
    head, sep, rest = token.partition("|")
    if sep and head.isdigit():
        return int(head), rest
    return None, token


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: the set's token, the member's score and its id. The next page
    starts after (score, id) in that set, wherever that member is now (or, if the set is
    gone, at the next set of the walk)."""

    set: str
    score: str
    id: str

    def encode(self) -> str:
        """The opaque text handed to callers (URL-safe base64 of JSON, no padding)."""
        raw = json.dumps([self.set, self.score, self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: object) -> Cursor:
        """The cursor `encode` made.

        Raises:
            ScheduleError: field "cursor", for anything `encode` cannot have produced.
        """
        if not isinstance(text, str) or not text:
            raise ScheduleError(
                f"cursor must be a string from an earlier page; got {text!r}", field="cursor"
            )
        try:
            value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except (binascii.Error, ValueError) as exc:  # (json's errors are ValueErrors)
            raise ScheduleError(
                f"cursor {text!r} is not one this API returned", field="cursor"
            ) from exc
        start = (
            isinstance(value, list)
            and len(value) == 3
            and isinstance(value[0], str)
            and partition_token(value[0])[0] is not None
            and partition_token(value[0])[1] == ""
            and value[1:] == ["", ""]
        )  # a partitioned listing's next partition, from its start
        if not start and (
            not isinstance(value, list)
            or len(value) != 3
            or not isinstance(value[0], str)
            or not _token(partition_token(value[0])[1])
            or not isinstance(value[1], str)
            or not _finite(value[1])
            or not isinstance(value[2], str)
            or not value[2]
        ):
            raise ScheduleError(f"cursor {text!r} is not one this API returned", field="cursor")
        return cls(value[0], value[1], value[2])


def _bound(name: str, value: object) -> str:
    """A time bound of a listing as the sets' score text (ms since the epoch); "" for None."""
    if value is None:
        return ""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ScheduleError(f"{name} must be an aware datetime; got {shown(value)}", field=name)
    return str(utc_to_ms(value))


def _token(token: str) -> bool:
    try:
        set_order(token)
    except ValueError:
        return False
    return True


def _finite(score: str) -> bool:
    try:
        return math.isfinite(float(score))
    except ValueError:
        return False


def check_limit(limit: object) -> int:
    """The page size.

    Raises:
        ScheduleError: field "limit", unless an int in 1..MAX_LIMIT.
    """
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise ScheduleError(
            f"limit must be an int from 1 to {MAX_LIMIT}; got {limit!r}", field="limit"
        )
    return limit


def check_state(state: object) -> JobState | None:
    """A JobState from a member, its value ("running") or its name ("RUNNING"); None for all.

    Raises:
        ScheduleError: field "state", for anything else.
    """
    if state is None or isinstance(state, JobState):
        return state
    if isinstance(state, str):
        for member in JobState:
            if state in (member.value, member.name):
                return member
    raise ScheduleError(
        f"state must be one of {', '.join(s.value for s in JobState)}; got {state!r}", field="state"
    )


@dataclass(frozen=True)
class Walk:
    """What one listing call walks: the sets of `groups` (in GROUPS order), keeping one
    state, topic and/or key, and members scored from `lowest` to `highest` (ms; "" no bound)."""

    groups: tuple[str, ...]
    state: str  # "" keeps every state
    topic: str  # "" keeps every topic
    key: str = ""  # "" keeps every key
    lowest: str = ""
    highest: str = ""

    @classmethod
    def of(
        cls,
        topic: object,
        state: object,
        key: object = None,
        since: object = None,
        until: object = None,
    ) -> Walk:
        """The walk of a request (state None: every set in a fixed order).

        Raises:
            ScheduleError: naming "topic", "state", "key", "since" or "until".
        """
        kept = check_state(state)
        name = "" if topic is None else check_topic(topic)
        if key is not None and (not isinstance(key, str) or not key or len(key) > 512):
            raise ScheduleError(
                f"key must be a non-empty string of at most 512 characters; got {shown(key)}",
                field="key",
            )
        lowest, highest = _bound("since", since), _bound("until", until)
        if lowest and highest and int(lowest) > int(highest):
            raise ScheduleError(f"since ({since}) must not be after until ({until})", field="since")
        extra = {"key": key or "", "lowest": lowest, "highest": highest}
        if kept is None:
            return cls(GROUPS, "", name, **extra)
        return cls(
            (GROUP_OF_STATE[kept],), kept.value if kept in FILTERED_STATES else "", name, **extra
        )

    def start(self, cursor: str | None) -> Cursor | None:
        """The decoded cursor, checked to belong to this walk's sets."""
        if cursor is None:
            return None
        at = Cursor.decode(cursor)
        token = partition_token(at.set)[1]
        if token and group_of(token) not in self.groups:
            raise ScheduleError("cursor belongs to a listing of another state", field="cursor")
        return at

    def sets(self, levels: list[str], parked: list[str]) -> list[str]:
        """This walk's set tokens in order, given the priority levels other than 0 and the
        topics with parked jobs."""
        tokens = []
        if "waiting" in self.groups:
            tokens += ["due", *(f"p:{p}" for p in levels)]
            tokens += [f"pk:{t}" for t in parked if not self.topic or t == self.topic]
        tokens += [g for g in self.groups if g != "waiting"]
        return sorted(tokens, key=set_order)
