"""One topic's page: its charts (console/trends.py), its failure rate against its nightly
baseline, its top error signatures of the last 24 hours, its policy and limits and what they
hold back. Every read is bounded: rollup rows, one index range of failed jobs, one hash."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from audit.analytics.signatures import signature
from audit.reader import AuditTrail
from console.data import COUNTS, acted_on, audit_of
from console.trends import Range, Series, Trends, read_trends
from scheduler.api import Scheduler
from scheduler.core.errors import StorageError
from scheduler.core.timeutil import ms_to_utc
from scheduler.core.topic_options import TopicOptions
from scheduler.facade.listing import every_topic
from scheduler.store.topic_memory import KnownTopic

ERRORS_READ = 500  # the newest failed jobs whose errors make the signatures (an index range)
SIGNATURES_SHOWN = 10


@dataclass(frozen=True)
class ErrorSignature:
    """An error signature (audit/analytics/signatures.py) among a topic's recent failures."""

    signature: str
    count: int
    example_job_id: str


@dataclass(frozen=True)
class HeldBack:
    """What a topic's limits hold back now (the topic page, GET /api/v1/topics)."""

    parked: int  # due jobs a limit (or the key policy) holds back: claim parked them
    parked_next: datetime | None  # when claim looks at them again (None: not planned)
    blocked_keys: list[str]  # a key_strict_fifo topic's blocked keys, sorted


async def held_back(scheduler: Scheduler, name: str, options: TopicOptions | None) -> HeldBack:
    """Read what `name`'s limits hold back: its parked due jobs and, under key_strict_fifo, its
    blocked keys (both reads at once)."""

    async def blocked() -> list[str]:
        strict = options is not None and options.policy == "key_strict_fifo"
        return await scheduler.blocked_keys(name) if strict else []

    (parked, next_ms), keys = await asyncio.gather(scheduler.store.parked(name), blocked())
    return HeldBack(parked, None if next_ms is None else ms_to_utc(next_ms), keys)


@dataclass(frozen=True)
class TopicDetail:
    """What the topic page shows."""

    name: str
    known: bool  # Redis or the rollups know the topic
    counts: dict[str, int]
    options: TopicOptions | None
    held: HeldBack
    unserved: KnownTopic | None
    trends: Trends
    day: Series  # the last 24 hours (the failure rate and what the policy held back)
    baseline: float | None  # the nightly report's mean daily failure rate; None: none yet
    baseline_days: int
    signatures: list[ErrorSignature]
    errors_read: int  # how many failed jobs the signatures come from (ERRORS_READ at most)
    problem: str | None

    @property
    def series(self) -> Series:
        return self.trends.series[self.name]

    @property
    def announcement(self) -> str:
        """What a screen reader is told when it changes (console.js, the page's live region)."""
        s = self.series
        span = "the last hour" if s.range == "1h" else "the last 24 hours"
        return f"Topic {self.name}: {acted_on(self.counts)}; {s.total_failed:,} failed in {span}"


async def _signatures(
    audit: AuditTrail, topic: str, since: datetime
) -> tuple[list[ErrorSignature], int]:
    errors = await audit.failure_errors(topic, since, ERRORS_READ)
    found: Counter[str] = Counter()
    example: dict[str, str] = {}
    for job_id, error in errors:
        kind = str(error.get("type") or "") if error else ""
        message = str(error.get("message") or "") if error else ""
        sig = signature(kind or None, message or None, job_id)
        found[sig] += 1
        example.setdefault(sig, job_id)  # (newest first: the latest such job)
    top = [ErrorSignature(s, n, example[s]) for s, n in found.most_common(SIGNATURES_SHOWN)]
    return top, len(errors)


async def topic_detail(
    scheduler: Scheduler, name: str, range_: Range, baseline_days: int
) -> TopicDetail:
    """The topic page of `name` over `range_` (known or not: the page says which)."""
    now = ms_to_utc(scheduler.clock.now_ms())

    async def limits() -> tuple[TopicOptions | None, HeldBack]:
        options = await scheduler.get_topic(name)
        return options, await held_back(scheduler, name, options)

    # (what the limits hold back needs the options alone: it is read beside the other reads)
    counts, (options, held), names, known_topics = await asyncio.gather(
        scheduler.stats(name), limits(), every_topic(scheduler), scheduler.known_topics()
    )
    audit = audit_of(scheduler)
    trends = await read_trends(audit, range_, now, [name], one=name)
    day = (
        trends.series[name]
        if range_ == "24h"
        else (await read_trends(audit, "24h", now, [name], one=name)).series[name]
    )
    baseline: float | None = None
    signatures: list[ErrorSignature] = []
    read = 0
    problem = trends.problem
    if audit is not None and problem is None:
        try:
            today = now.date()
            rates = await audit.failure_baseline(today - timedelta(days=baseline_days), today)
            baseline = rates.get(name)
            signatures, read = await _signatures(audit, name, now - timedelta(hours=24))
        except (StorageError, OSError, TimeoutError) as exc:
            problem = f"audit trail unavailable: {exc}"
    return TopicDetail(
        name=name,
        known=name in names or not trends.series[name].empty or not day.empty,
        counts={k: counts.get(k, 0) for k in COUNTS},
        options=options,
        held=held,
        unserved=next((t for t in known_topics if t.topic == name and t.waiting), None),
        trends=trends,
        day=day,
        baseline=baseline,
        baseline_days=baseline_days,
        signatures=signatures,
        errors_read=read,
        problem=problem,
    )
