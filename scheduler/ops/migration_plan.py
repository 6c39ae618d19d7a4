"""Where everything of a namespace belongs under a new partition count (docs/how-to/scaling-out.md,
`horae partitions migrate`): the hash tags of both layouts, the target of a job, a schedule
and a per-key flow-control structure, and what each key of a partition is. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.keys import FLOW_KINDS, PER_NAME_PREFIXES, TAG_KEYS, KeyName, Keys
from scheduler.store.partitions import job_routing, partition_of, topic_home

# Per-key flow-control keys ({tag}:<kind>:<len(topic)>:<topic>:<key>, lua/_flow.lua).
_FLOW = re.compile(r"^(" + "|".join(FLOW_KINDS) + r"):(\d+):")
_PRIORITY = KeyName.DUE + KeyName.DUE_PRIORITY  # "due:p:"


def tags(namespace: str, count: int) -> list[Keys]:
    """The keys of each partition of a layout: the plain `{ns}` tag for 1, else `{ns|p}`."""
    return [Keys(namespace)] if count == 1 else [Keys(namespace, p) for p in range(count)]


def all_tags(namespace: str, old: int, new: int) -> list[Keys]:
    """Every tag either layout uses, the old layout's first (each once)."""
    seen: dict[str, Keys] = {}
    for k in tags(namespace, old) + tags(namespace, new):
        seen.setdefault(k.prefix, k)
    return list(seen.values())


def glob_escape(text: str) -> str:
    """`text` as a literal in a SCAN MATCH pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


@dataclass(frozen=True)
class FlowKey:
    """A per-key flow-control key, parsed: kind (FLOW_KINDS), topic, key (a dedupe key for dd)."""

    kind: str
    topic: str
    key: str


def parse_flow(suffix: str) -> FlowKey | None:
    """The parts of a key's name after its tag's prefix, when it is a per-key flow key."""
    m = _FLOW.match(suffix)
    if m is None:
        return None
    start, n = m.end(), int(m.group(2))
    topic, rest = suffix[start : start + n], suffix[start + n :]
    if len(topic) != n or not rest.startswith(":"):
        return None
    return FlowKey(m.group(1), topic, rest[1:])


def flow_key(tag: Keys, kind: str, topic: str, key: str) -> str:
    """The name of a per-key flow key on `tag` (as flow_key in lua/_flow.lua builds it)."""
    return f"{tag.prefix}{kind}:{len(topic)}:{topic}:{key}"


@dataclass(frozen=True)
class Router:
    """Targets under the new count `count`; `pinned`: the topics with a topic-wide limit
    (partitions.topic_wide_limit), whose jobs and schedules all live on their home."""

    count: int
    pinned: Collection[str]

    def home(self, topic: str) -> int | None:
        return topic_home(topic, self.count) if topic in self.pinned else None

    def job(self, job_id: str, fields: Mapping[str, str], dedupe: str = "") -> int:
        """A job's partition: its topic's home, else by key, else dedupe key (the hash's `dd`,
        else `dedupe`: a windowed dedupe key it holds, which only the key's holder names), else
        id."""
        home = self.home(fields.get("topic", ""))
        if home is not None:
            return home
        return partition_of(
            job_routing(job_id, fields.get("key", ""), fields.get("dd", "") or dedupe), self.count
        )

    def schedule(self, name: str, topic: str) -> int:
        """A schedule's partition: its topic's home, else by its name (RedisStore.upsert_cron)."""
        home = self.home(topic)
        return home if home is not None else partition_of(name, self.count)

    def flow(self, topic: str, key: str) -> int:
        """A per-key structure not held by one job (a rate limit, a blocked FIFO key): where the
        key's jobs go."""
        home = self.home(topic)
        return home if home is not None else partition_of(key, self.count)


def job_sets(tag: Keys, job_id: str, fields: Mapping[str, str]) -> list[str]:
    """Every sorted set of `tag` a job may be a member of (its scores are read, then copied)."""
    topic = fields.get("topic", "")
    sets = [
        tag.due,
        tag.completed,
        tag.failed,
        tag.cancelled,
        tag.active,
        tag.dead_letters(topic),
        tag.parked(topic),
    ]
    prio = fields.get("prio", "")
    if prio not in ("", "0"):
        sets.append(tag.due_priority(prio))
    if fields.get("pol") == "key_strict_fifo":
        sets.append(flow_key(tag, KeyName.FLOW_FIFO, topic, fields.get("key", "")))
    return sets


def retarget(key: str, source: Keys, target: Keys) -> str:
    """A key of `source` renamed to the same key on `target`."""
    return target.prefix + key[len(source.prefix) :]


def job_ops(
    source: Keys,
    target: Keys,
    job_id: str,
    fields: Mapping[str, str],
    scores: Mapping[str, str],
    marks: Sequence[tuple[str, str, str]],
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """The ops of copy_entry.lua and drop_entry.lua for one job: (key, [kind, a, b]) each.

    Args:
        source, target: the partitions it leaves and joins.
        fields: its hash.
        scores: set key on source -> its score there (job_sets that hold it).
        marks: the flow marks it holds on source: ("h", ks key, slot) for a policy slot,
            ("x", dd key, pttl ms or "") for a dedupe key.
    """
    topic = fields.get("topic", "")
    copy: list[tuple[str, list[str]]] = []
    drop: list[tuple[str, list[str]]] = []
    for key, score in scores.items():
        there = retarget(key, source, target)
        suffix = key[len(source.prefix) :]
        if suffix.startswith(KeyName.PARKED):
            # parked: claim looks at the topic again at once, as after a release
            copy.append((there, ["z", score, job_id]))
            copy.append((target.unpark, ["u", "0", topic]))
        else:
            copy.append((there, ["z", score, job_id]))
            if suffix.startswith(_PRIORITY):
                prio = suffix[len(_PRIORITY) :]
                copy.append((target.due_levels, ["z", prio, prio]))
            if suffix.startswith(KeyName.DEAD_LETTERS):
                copy.append((target.dead_letter_topics, ["s", topic, ""]))
        drop.append((key, ["z", "", job_id]))
    for kind, key, extra in marks:
        there = retarget(key, source, target)
        if kind == "h":
            copy.append((there, ["h", extra, job_id]))
            drop.append((key, ["h", extra, job_id]))
        else:
            copy.append((there, ["x", job_id, extra]))
            drop.append((key, ["x", job_id, ""]))
    return copy, drop


def schedule_ops(
    source: Keys, target: Keys, name: str, next_ms: str | None, declared: bool
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """The ops of copy_entry.lua and drop_entry.lua for one schedule: its names set, its place
    among the active ones (`next_ms`: its score there; None when paused) and the declared set."""
    copy = [(target.cron_names, ["s", name, ""])]
    drop = [(source.cron_names, ["s", name, ""])]
    if next_ms is not None:
        copy.append((target.crons_due, ["z", next_ms, name]))
        drop.append((source.crons_due, ["z", "", name]))
    if declared:
        copy.append((target.crons_declared, ["s", name, ""]))
        drop.append((source.crons_declared, ["s", name, ""]))
    return copy, drop


def leftover_key(suffix: str) -> bool:
    """Whether a key of a tag the new layout drops (after its jobs and schedules moved) is one
    of the namespace's own kinds, so clearing it is safe: anything else is left alone."""
    return (
        suffix in TAG_KEYS or suffix.startswith(PER_NAME_PREFIXES) or parse_flow(suffix) is not None
    )
