"""Redis key names. Every key of a namespace shares the `{ns}` hash tag so all
scripts touch one Redis Cluster slot; a namespace split into partitions
(docs/how-to/scaling-out.md) gives partition p the tag `{ns|p}`, so each partition is one
slot and one script still touches one partition only (`|` is not allowed in a namespace's
name, so no partition's tag is another namespace's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

# The end of a tag's part of every key name: `{ns}:` (Keys.prefix); a job's key is
# `{ns}:j:<id>`, so '}:' + JOB is where a job key's name starts after its tag.
TAG_END: Final = "}:"


class KeyName:
    """The one declaration of every key name: what follows a tag's prefix (Keys.prefix) or, for
    DUE_PRIORITY and DUE_LEVELS, the due set's name. Python builds keys from these (Keys below);
    each Lua script gets the ones it uses compiled in as `K_<NAME>` locals
    (scheduler/store/scripts.py), so no script names a key declared nowhere else
    (tests/unit/test_lua_names.py)."""

    JOB: Final = "j:"  # + id: a job's hash
    PAYLOAD: Final = "p:"  # + id: a big payload's string
    LOGS: Final = "l:"  # + id: a job's log lines
    CHILDREN: Final = "ch:"  # + id: the ids of the jobs waiting for this one (`after=`)
    PARENT_RESULTS: Final = "pr:"  # + id: a child's done parents, parent id -> result JSON
    WAITING_PARENTS: Final = "wfp"  # zset: the jobs waiting for parents, by creation ms
    DUE: Final = "due"
    DUE_PRIORITY: Final = ":p:"  # due + this + p: the due jobs of priority p != 0
    DUE_LEVELS: Final = ":levels"  # due + this: the priorities != 0 with waiting jobs
    ACTIVE: Final = "active"
    COMPLETED: Final = "completed"
    FAILED: Final = "failed"
    CANCELLED: Final = "cancelled"
    LEASE_SEQ: Final = "lease_seq"
    FIFO_SEQ: Final = "seq"  # the key_strict_fifo places (lua/_flow.lua flow_join)
    COUNTS: Final = "counts"
    OUTBOX: Final = "outbox"
    WAKE: Final = "wake"
    DONE: Final = "done"
    CRON: Final = "cron:"  # + name: a schedule's hash
    CRONS: Final = "crons"
    CRON_NAMES: Final = "cron_names"
    CRONS_DECLARED: Final = "crons_declared"
    TOPIC: Final = "topic:"  # + topic: its configuration
    TOPIC_NAMES: Final = "topic_names"
    FIFO_BLOCKED: Final = "fifo_blocked:"  # + topic
    DEAD_LETTERS: Final = "dlq:"  # + topic
    DEAD_LETTER_TOPICS: Final = "dlq_topics"
    WORKERS: Final = "workers"
    SERVED: Final = "served"
    KNOWN_TOPICS: Final = "topics_known"
    PARKED: Final = "pk:"  # + topic: its due jobs a limit parked (lua/claim.lua)
    UNPARK: Final = "unpark"
    META: Final = "meta"  # under the plain {ns} tag only (Keys.meta)
    MIGRATE_LOCK: Final = "migrate_lock"  # under the plain {ns} tag only (ops/migrate_store.py)
    # The kinds of the per-key flow-control keys, {tag}:<kind>:<len(topic)>:<topic>:<key>
    # (lua/_flow.lua flow_key, ops/migration_plan.py flow_key)
    FLOW_SLOTS: Final = "ks"  # hash: a key's policy slots -> holder id
    FLOW_FIFO: Final = "ff"  # zset: a key_strict_fifo key's unfinished jobs
    FLOW_DEDUPE: Final = "dd"  # string: the job holding a dedupe key
    FLOW_RATE: Final = "rl"  # string: a rate limit's theoretical arrival time


def key_names() -> Mapping[str, str]:
    """Every KeyName, NAME -> its text, in declaration order."""
    return MappingProxyType(
        {n: v for n, v in vars(KeyName).items() if n.isupper() and isinstance(v, str)}
    )


# The per-key flow-control kinds.
FLOW_KINDS: tuple[str, ...] = (
    KeyName.FLOW_SLOTS,
    KeyName.FLOW_FIFO,
    KeyName.FLOW_DEDUPE,
    KeyName.FLOW_RATE,
)
# The keys a tag has once (not per job, schedule, topic or flow key), after its prefix: what a
# partition the namespace no longer has is cleared of once its jobs and schedules left
# (ops/migration_plan.py).
TAG_KEYS: tuple[str, ...] = (
    KeyName.DUE,
    KeyName.DUE + KeyName.DUE_LEVELS,
    KeyName.ACTIVE,
    KeyName.COMPLETED,
    KeyName.FAILED,
    KeyName.CANCELLED,
    KeyName.LEASE_SEQ,
    KeyName.FIFO_SEQ,
    KeyName.COUNTS,
    KeyName.OUTBOX,
    KeyName.CRONS,
    KeyName.CRON_NAMES,
    KeyName.CRONS_DECLARED,
    KeyName.TOPIC_NAMES,
    KeyName.DEAD_LETTER_TOPICS,
    KeyName.WORKERS,
    KeyName.SERVED,
    KeyName.KNOWN_TOPICS,
    KeyName.UNPARK,
    KeyName.WAITING_PARENTS,
)
# The prefixes of a tag's keys one per topic or priority (+ its name).
PER_NAME_PREFIXES: tuple[str, ...] = (
    KeyName.DUE + KeyName.DUE_PRIORITY,
    KeyName.TOPIC,
    KeyName.FIFO_BLOCKED,
    KeyName.DEAD_LETTERS,
    KeyName.PARKED,
)
# The keys whose presence under the plain `{ns}` tag shows that the unpartitioned layout holds
# jobs, schedules or events (scheduler/store/partitions.py LEGACY_KEYS).
DATA_KEYS: tuple[str, ...] = (
    KeyName.DUE,
    KeyName.ACTIVE,
    KeyName.OUTBOX,
    KeyName.CRONS,
    KeyName.COUNTS,
    KeyName.COMPLETED,
    KeyName.FAILED,
)


@dataclass(frozen=True)
class Keys:
    """The keys of one namespace (one independent scheduler)."""

    namespace: str
    partition: int | None = None  # None: the unpartitioned layout (partitions = 1)

    @property
    def prefix(self) -> str:
        """Prefix of every key; job hashes are `prefix + KeyName.JOB + id`."""
        if self.partition is None:
            return "{" + self.namespace + TAG_END
        return "{" + self.namespace + "|" + str(self.partition) + TAG_END

    @property
    def meta(self) -> str:
        """Hash of the namespace's layout (`partitions`): always under the plain `{ns}` tag, so
        every process finds it before it knows the count (scheduler/store/partitions.py)."""
        return "{" + self.namespace + TAG_END + KeyName.META

    def job(self, job_id: str) -> str:
        """Hash holding one job's fields."""
        return f"{self.prefix}{KeyName.JOB}{job_id}"

    def payload(self, job_id: str) -> str:
        """String holding the payload JSON of a job whose payload is too big to inline in its
        hash (smaller ones are chunk fields of the hash: see lua/_lib.lua)."""
        return f"{self.prefix}{KeyName.PAYLOAD}{job_id}"

    def logs(self, job_id: str) -> str:
        """List of a job's last log lines (event.log; entries: scheduler/core/progress.py)."""
        return f"{self.prefix}{KeyName.LOGS}{job_id}"

    def children(self, job_id: str) -> str:
        """Set of the jobs waiting for this one to finish (lua/_deps.lua)."""
        return f"{self.prefix}{KeyName.CHILDREN}{job_id}"

    def parent_results(self, job_id: str) -> str:
        """Hash of a waiting job's done parents: parent id -> its result JSON (lua/_deps.lua)."""
        return f"{self.prefix}{KeyName.PARENT_RESULTS}{job_id}"

    @property
    def waiting_parents(self) -> str:
        """Sorted set of the jobs in state waiting_for_parents, scored by creation ms: not in a
        due set until their last parent completes (lua/_deps.lua)."""
        return self.prefix + KeyName.WAITING_PARENTS

    @property
    def job_prefix(self) -> str:
        """Scripts that discover job ids (claim, prune) build job keys from this."""
        return self.prefix + KeyName.JOB

    @property
    def due(self) -> str:
        """Sorted set of waiting and retrying jobs, scored by due time (ms)."""
        return self.prefix + KeyName.DUE

    def due_priority(self, prio: str | int) -> str:
        """Sorted set of the waiting jobs of priority `prio` (not 0), scored by due time."""
        return f"{self.due}{KeyName.DUE_PRIORITY}{prio}"

    @property
    def due_levels(self) -> str:
        """Sorted set of the priorities other than 0 that have waiting jobs (lua/_flow.lua)."""
        return self.due + KeyName.DUE_LEVELS

    def parked(self, topic: str) -> str:
        """Sorted set of a topic's due jobs a limit parked, by due time (lua/claim.lua)."""
        return f"{self.prefix}{KeyName.PARKED}{topic}"

    @property
    def unpark(self) -> str:
        """Sorted set of topic -> ms when claim moves its parked jobs back (lua/_flow.lua)."""
        return self.prefix + KeyName.UNPARK

    @property
    def fifo_seq(self) -> str:
        """Counter giving each key_strict_fifo job its place (lua/_flow.lua flow_join)."""
        return self.prefix + KeyName.FIFO_SEQ

    @property
    def migrate_lock(self) -> str:
        """The lock of a store migration (scheduler/ops/migrate_store.py)."""
        return self.prefix + KeyName.MIGRATE_LOCK

    @property
    def active(self) -> str:
        """Sorted set of running jobs, scored by lease deadline (ms)."""
        return self.prefix + KeyName.ACTIVE

    @property
    def completed(self) -> str:
        """Sorted set of completed jobs, scored by finish time (ms), for retention."""
        return self.prefix + KeyName.COMPLETED

    @property
    def failed(self) -> str:
        """Sorted set of failed jobs, scored by finish time (ms), for retention."""
        return self.prefix + KeyName.FAILED

    @property
    def cancelled(self) -> str:
        """Sorted set of cancelled jobs, scored by finish time (ms), for retention."""
        return self.prefix + KeyName.CANCELLED

    @property
    def lease_seq(self) -> str:
        """Counter numbering every lease of the namespace, so no two lease tokens are equal."""
        return self.prefix + KeyName.LEASE_SEQ

    @property
    def counts(self) -> str:
        """Hash of job counts: one field `<topic>|<state>` per topic and state (no totals:
        store.stats() sums them per state)."""
        return self.prefix + KeyName.COUNTS

    @property
    def outbox(self) -> str:
        """Stream of audit events (format in scheduler.core.outbox)."""
        return self.prefix + KeyName.OUTBOX

    @property
    def wake(self) -> str:
        """Pub/sub channel: a job became the earliest due; payload is its due ms."""
        return self.prefix + KeyName.WAKE

    @property
    def done(self) -> str:
        """Pub/sub channel: a job someone waits for (Scheduler.wait) ended or is gone; payload its
        id."""
        return self.prefix + KeyName.DONE

    def cron(self, name: str) -> str:
        """Hash holding one cron schedule."""
        return f"{self.prefix}{KeyName.CRON}{name}"

    @property
    def cron_prefix(self) -> str:
        """Scripts that discover schedule names build their keys from this."""
        return self.prefix + KeyName.CRON

    @property
    def crons_due(self) -> str:
        """Sorted set of active (unpaused) schedules, scored by next fire (ms)."""
        return self.prefix + KeyName.CRONS

    @property
    def cron_names(self) -> str:
        """Set of every schedule name, paused or not (for listing)."""
        return self.prefix + KeyName.CRON_NAMES

    @property
    def crons_declared(self) -> str:
        """Set of the names of schedules declared beside listeners (what starting workers own)."""
        return self.prefix + KeyName.CRONS_DECLARED

    def topic(self, name: str) -> str:
        """Hash holding one topic's stored TopicOptions (scheduler.facade.topics)."""
        return f"{self.prefix}{KeyName.TOPIC}{name}"

    @property
    def topic_prefix(self) -> str:
        """fail.lua reads a failed job's topic configuration (its dead_letter) from this + topic."""
        return self.prefix + KeyName.TOPIC

    @property
    def topic_names(self) -> str:
        """Set of every configured topic name (for list_topics)."""
        return self.prefix + KeyName.TOPIC_NAMES

    def fifo_blocked(self, topic: str) -> str:
        """Set of the keys of a key_strict_fifo topic whose queue is blocked (written by the engine;
        read by Scheduler.blocked_keys)."""
        return f"{self.prefix}{KeyName.FIFO_BLOCKED}{topic}"

    def dead_letters(self, topic: str) -> str:
        """Sorted set of the dead letters held on a dead-letter topic, scored by failure time (ms).
        Dead letters are never in the due set: no worker runs or completes them."""
        return f"{self.prefix}{KeyName.DEAD_LETTERS}{topic}"

    @property
    def dead_letter_prefix(self) -> str:
        """fail.lua builds a dead-letter topic's set from this + topic."""
        return self.prefix + KeyName.DEAD_LETTERS

    @property
    def dead_letter_topics(self) -> str:
        """Set of the dead-letter topics holding (or having held) dead letters: retention prunes
        each."""
        return self.prefix + KeyName.DEAD_LETTER_TOPICS

    @property
    def workers(self) -> str:
        """Hash of the worker registry: worker id -> entry JSON (layout:
        lua/advertise_worker.lua)."""
        return self.prefix + KeyName.WORKERS

    @property
    def served(self) -> str:
        """Hash of topic -> ms until which some live worker serves it (advertised with its
        heartbeat)."""
        return self.prefix + KeyName.SERVED

    @property
    def known_topics(self) -> str:
        """Hash of topic -> "<ms>|<worker id>|<app>": when a worker with listeners for it last
        served it (advertise_worker.lua); its jobs wait for a worker until [worker] topic_memory
        passes (claim.lua)."""
        return self.prefix + KeyName.KNOWN_TOPICS


# Job hash fields that are not stored while they hold these values (memory per delayed job);
# every reader fills them back: Lua through `DEFAULTS` (compiled into each script from this
# table), scheduler/store/reads.py and scheduler/core/topic_options.py from this table.
# A storage format, not a policy: never change a value, or jobs already stored without
# the field would change meaning (the retry policy's own defaults may change).
JOB_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "meta": "{}",
        "tz": "UTC",
        "max": "5",
        "btype": "exponential",
        "bdelay": "30000",
        "trace": "",
        "cron": "",
        "bmax": "3600000",
        "bjit": "none",
        "dlq": "",
    }
)

# Hash fields holding a payload's chunks, in order (layout: lua/_lib.lua); compiled
# into each script as CHUNK_FIELDS, so Lua and scheduler/store/reads.py read the same names.
