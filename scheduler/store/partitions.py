"""Which partition a job, a schedule or a topic lives on, and the namespace's stored layout
(docs/how-to/scaling-out.md). Partition numbers come from CRC32, stable across processes and
Python versions (hash() is salted per process)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence

from scheduler.core.errors import ConfigError
from scheduler.core.keys import DATA_KEYS

MAX_PARTITIONS = 1024


def partition_of(text: str, count: int) -> int:
    """The partition of a routing text (a key, a dedupe key, an id, a schedule or topic name)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass")) % count if count > 1 else 0


def job_routing(job_id: str, key: str = "", dedupe_key: str = "") -> str:
    """What places a job: its key (per-key policies, FIFO and key rate limits stay on one
    partition), else its dedupe key (so duplicates meet), else its id."""
    return key or dedupe_key or job_id


def parse_subset(text: str, count: int) -> tuple[int, ...]:
    """A worker's partitions (`worker.partitions`: "" every one, else "0,2,5" or "0-3").

    Raises:
        ConfigError: naming the value and what is allowed.
    """
    if not text.strip():
        return tuple(range(count))
    chosen: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise ConfigError(
                f"worker.partitions={text!r}: give partition numbers like 0,2,5 or 0-3"
            ) from None
        if not 0 <= first <= last < count:
            raise ConfigError(
                f"worker.partitions={text!r}: {part.strip()!r} is outside 0..{count - 1} "
                f"(the namespace has {count} partitions)"
            )
        chosen.update(range(first, last + 1))
    return tuple(sorted(chosen))


def topic_home(name: str, count: int) -> int:
    """The partition a topic with a topic-wide limit lives on (docs/how-to/scaling-out.md)."""
    return partition_of("topic:" + name, count)


def topic_wide_limit(fields: Mapping[str, str]) -> bool:
    """Whether a topic's stored configuration has a limit only one partition can count (a
    concurrency, a rate limit not per key): such a topic lives on its home partition."""
    return "concurrency" in fields or ("rl_max" in fields and fields.get("rl_key") != "1")


def layout_error(namespace: str, stored: int, configured: int) -> ConfigError:
    """The refusal of a process whose partition count differs from the namespace's."""
    return ConfigError(
        f"namespace {namespace!r} has partitions={stored} but this process is configured with "
        f"partitions={configured}: every process of a namespace must "
        f"use its stored count; to change it, stop every worker and "
        f"producer and run `horae partitions migrate --to {configured}` "
        f"(docs/how-to/upgrading.md#change-the-partition-count)"
    )


# Fields of `{ns}:meta` while a migration runs (scheduler/ops/migration.py); `partitions` keeps the
# old count.
MIGRATION_FIELDS: Sequence[str] = (
    "migrating_from",
    "migrating_to",
    "migration_started",
    "migration_by",
)


def migration_error(namespace: str, record: Sequence[str | None]) -> ConfigError:
    """The refusal of a process connecting while a partition migration is recorded
    (`record`: the MIGRATION_FIELDS values)."""
    old, new, started, by = record
    return ConfigError(
        f"namespace {namespace!r} is being migrated from partitions={old} to partitions={new} "
        f"(started {started} by {by}): no process may use it until the "
        f"migration is finished; finish it by running `horae partitions "
        f"migrate --to {new}` again (it resumes where it stopped), then "
        f"start every process with partitions={new} "
        f"(docs/how-to/upgrading.md#if-it-stops-halfway-run-it-again)"
    )


# The keys under the plain `{ns}` tag that show the unpartitioned layout holds data.
LEGACY_KEYS: Sequence[str] = DATA_KEYS
