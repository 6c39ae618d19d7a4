"""Which partition a job, a schedule or a topic lives on, and the namespace's stored layout
(README: Scaling out). Partition numbers come from CRC32, stable across processes and
Python versions (hash() is salted per process)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from scheduler.errors import ConfigError

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
            raise ConfigError(f"worker.partitions={text!r}: give partition numbers like 0,2,5 or 0-3") from None
        if not 0 <= first <= last < count:
            raise ConfigError(f"worker.partitions={text!r}: {part.strip()!r} is outside 0..{count - 1} "
                              f"(the namespace has {count} partitions)")
        chosen.update(range(first, last + 1))
    return tuple(sorted(chosen))


def layout_error(namespace: str, stored: int, configured: int) -> ConfigError:
    """The refusal of a process whose partition count differs from the namespace's."""
    return ConfigError(
        f"namespace {namespace!r} has partitions={stored} but this process is configured with "
        f"partitions={configured}: every process of a namespace must use the count the namespace was "
        f"created with; to change it, drain the namespace and use a new one (README: Scaling out)")


LEGACY_KEYS: Sequence[str] = ("due", "active", "outbox", "crons", "counts", "completed", "failed")
