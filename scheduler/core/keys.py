"""Redis key names. Every key of a namespace shares the `{ns}` hash tag so all
scripts touch one Redis Cluster slot; a namespace split into partitions (README: Scaling
out) gives partition p the tag `{ns|p}`, so each partition is one slot and one script
still touches one partition only (`|` is not allowed in a namespace's name, so no partition's
tag is another namespace's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    """The keys of one namespace (one independent scheduler)."""

    namespace: str
    partition: int | None = None  # None: the unpartitioned layout (partitions = 1)

    @property
    def prefix(self) -> str:
        """Prefix of every key; job hashes are `prefix + "j:" + id`."""
        if self.partition is None:
            return "{" + self.namespace + "}:"
        return "{" + self.namespace + "|" + str(self.partition) + "}:"

    @property
    def meta(self) -> str:
        """Hash of the namespace's layout (`partitions`): always under the plain `{ns}` tag, so
        every process finds it before it knows the count (scheduler/store/partitions.py)."""
        return "{" + self.namespace + "}:meta"

    def job(self, job_id: str) -> str:
        """Hash holding one job's fields."""
        return f"{self.prefix}j:{job_id}"

    def payload(self, job_id: str) -> str:
        """String holding the payload JSON of a job whose payload is too big to inline in its
        hash (smaller ones are chunk fields of the hash: see lua/_lib.lua)."""
        return f"{self.prefix}p:{job_id}"

    def logs(self, job_id: str) -> str:
        """List of a job's last log lines (event.log; entries: scheduler/core/progress.py)."""
        return f"{self.prefix}l:{job_id}"

    @property
    def job_prefix(self) -> str:
        """Scripts that discover job ids (claim, prune) build job keys from this."""
        return f"{self.prefix}j:"

    @property
    def due(self) -> str:
        """Sorted set of waiting and retrying jobs, scored by due time (ms)."""
        return f"{self.prefix}due"

    @property
    def active(self) -> str:
        """Sorted set of running jobs, scored by lease deadline (ms)."""
        return f"{self.prefix}active"

    @property
    def completed(self) -> str:
        """Sorted set of completed jobs, scored by finish time (ms), for retention."""
        return f"{self.prefix}completed"

    @property
    def failed(self) -> str:
        """Sorted set of failed jobs, scored by finish time (ms), for retention."""
        return f"{self.prefix}failed"

    @property
    def cancelled(self) -> str:
        """Sorted set of cancelled jobs, scored by finish time (ms), for retention."""
        return f"{self.prefix}cancelled"

    @property
    def lease_seq(self) -> str:
        """Counter numbering every lease of the namespace, so no two lease tokens are equal."""
        return f"{self.prefix}lease_seq"

    @property
    def counts(self) -> str:
        """Hash of job counts: one field `<topic>|<state>` per topic and state (no totals:
        store.stats() sums them per state)."""
        return f"{self.prefix}counts"

    @property
    def outbox(self) -> str:
        """Stream of audit events (format in scheduler.core.outbox)."""
        return f"{self.prefix}outbox"

    @property
    def wake(self) -> str:
        """Pub/sub channel: a job became the earliest due; payload is its due ms."""
        return f"{self.prefix}wake"

    @property
    def done(self) -> str:
        """Pub/sub channel: a job someone waits for (Scheduler.wait) ended or is gone; payload its
        id."""
        return f"{self.prefix}done"

    def cron(self, name: str) -> str:
        """Hash holding one cron schedule."""
        return f"{self.prefix}cron:{name}"

    @property
    def cron_prefix(self) -> str:
        """Scripts that discover schedule names build their keys from this."""
        return f"{self.prefix}cron:"

    @property
    def crons_due(self) -> str:
        """Sorted set of active (unpaused) schedules, scored by next fire (ms)."""
        return f"{self.prefix}crons"

    @property
    def cron_names(self) -> str:
        """Set of every schedule name, paused or not (for listing)."""
        return f"{self.prefix}cron_names"

    @property
    def crons_declared(self) -> str:
        """Set of the names of schedules declared beside listeners (what starting workers own)."""
        return f"{self.prefix}crons_declared"

    def topic(self, name: str) -> str:
        """Hash holding one topic's stored TopicOptions (scheduler.facade.topics)."""
        return f"{self.prefix}topic:{name}"

    @property
    def topic_prefix(self) -> str:
        """fail.lua reads a failed job's topic configuration (its dead_letter) from this + topic."""
        return f"{self.prefix}topic:"

    @property
    def topic_names(self) -> str:
        """Set of every configured topic name (for list_topics)."""
        return f"{self.prefix}topic_names"

    def fifo_blocked(self, topic: str) -> str:
        """Set of the keys of a key_strict_fifo topic whose queue is blocked (written by the engine;
        read by Scheduler.blocked_keys)."""
        return f"{self.prefix}fifo_blocked:{topic}"

    def dead_letters(self, topic: str) -> str:
        """Sorted set of the dead letters held on a dead-letter topic, scored by failure time (ms).
        Dead letters are never in the due set: no worker runs or completes them."""
        return f"{self.prefix}dlq:{topic}"

    @property
    def dead_letter_prefix(self) -> str:
        """fail.lua builds a dead-letter topic's set from this + topic."""
        return f"{self.prefix}dlq:"

    @property
    def dead_letter_topics(self) -> str:
        """Set of the dead-letter topics holding (or having held) dead letters: retention prunes
        each."""
        return f"{self.prefix}dlq_topics"

    @property
    def workers(self) -> str:
        """Hash of the worker registry: worker id -> entry JSON (layout:
        lua/advertise_worker.lua)."""
        return f"{self.prefix}workers"

    @property
    def served(self) -> str:
        """Hash of topic -> ms until which some live worker serves it (advertised with its
        heartbeat)."""
        return f"{self.prefix}served"

    @property
    def known_topics(self) -> str:
        """Hash of topic -> "<ms>|<worker id>|<app>": when a worker with listeners for it last
        served it (advertise_worker.lua); its jobs wait for a worker until [worker] topic_memory
        passes (claim.lua)."""
        return f"{self.prefix}topics_known"
