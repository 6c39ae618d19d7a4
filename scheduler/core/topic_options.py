"""TopicOptions: a topic's configuration, checked and normalised, and its stored form,
the hash `{ns}:topic:<name>` the Lua engine reads. Pure.

Unlike RetryPolicy or RateLimit, TopicOptions is not checked when built: its `retry`
may be the plain mapping form, whose omitted keys mean the Scheduler's configured
default, so `configure_topic` checks it (as schedule_at checks its arguments).

Stored hash fields (absent when unset): `policy` (always), `dead_letter`; the retry
default as the job hash names it, all five or none: `max`, `btype`, `bdelay` (ms),
`bmax` (ms), `bjit`; `timeout` (ms), `rl_max`, `rl_per` (ms), `rl_key` ("1" when per
key), `concurrency`, `prio` (only when not 0), `warn`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Literal, cast

from scheduler.core.errors import InvalidFlowOption, ScheduleError, shown
from scheduler.core.flow import RateLimit, check_int, duration_ms, parse_priority
from scheduler.core.keys import JOB_DEFAULTS
from scheduler.core.retry import Backoff, BackoffType, Jitter, RetryPolicy, parse_retry
from scheduler.core.validation import check_dead_letter, check_topic

Policy = Literal["standard", "short", "singleton", "stately", "exclusive", "key_strict_fifo"]
POLICIES: tuple[str, ...] = (
    "standard",
    "short",
    "singleton",
    "stately",
    "exclusive",
    "key_strict_fifo",
)
MAX_TIMEOUT_MS = 30 * 86_400_000  # 30 days
MAX_CONCURRENCY = 1_000_000
MAX_WARNING_SIZE = 1_000_000_000


@dataclass(frozen=True)
class TopicOptions:
    """A topic's configuration (`Scheduler.configure_topic`); `get_topic` returns it normalised.

    policy: how the topic's jobs queue (standard, short, singleton, stately, exclusive,
        key_strict_fifo); fixed once stored (TopicPolicyLocked).
    retry: the default RetryPolicy of the topic's jobs (or its plain mapping form).
    timeout: the default per-attempt limit (timedelta, seconds or "2m"); 1 ms .. 30 days.
    rate_limit: a RateLimit. concurrency: at most this many running at once (>= 1).
    priority_default: the jobs' default priority (-1000..1000, or "low"/"normal"/"high").
    warning_size: warn when this many jobs wait (>= 1).
    dead_letter: where a job failing for good is copied (a job's own dead_letter= wins).
    """

    policy: Policy = "standard"
    retry: RetryPolicy | Mapping[str, Any] | None = None
    timeout: timedelta | float | str | None = None
    rate_limit: RateLimit | None = None
    concurrency: int | None = None
    priority_default: int | str = 0
    warning_size: int | None = None
    dead_letter: str | None = None


def check_topic_options(
    name: str, options: TopicOptions, default_retry: RetryPolicy
) -> TopicOptions:
    """`options` of topic `name`, normalised: retry a RetryPolicy (omitted keys of the mapping
    form from `default_retry`), timeout a timedelta of whole ms, priority_default an int.

    Raises:
        InvalidTopic: the name or the dead-letter topic is not usable, or they are equal.
        RetryPolicyInvalid: the retry policy is out of bounds.
        InvalidFlowOption: any other field, naming it, the value and what is allowed.
    """
    check_topic(name)
    if not isinstance(options, TopicOptions):
        raise ScheduleError(
            f"options must be TopicOptions; got {type(options).__name__}", field="options"
        )
    o = options
    if o.policy not in POLICIES:
        raise InvalidFlowOption(
            f"policy must be one of {', '.join(POLICIES)}; got {shown(o.policy)}", field="policy"
        )
    if o.rate_limit is not None and not isinstance(o.rate_limit, RateLimit):
        raise InvalidFlowOption(
            f"rate_limit must be a RateLimit(max, per, per_key) or None; got {shown(o.rate_limit)} "
            f"({type(o.rate_limit).__name__})",
            field="rate_limit",
        )
    return replace(
        o,
        retry=None if o.retry is None else parse_retry(o.retry, default_retry),
        timeout=None
        if o.timeout is None
        else timedelta(milliseconds=duration_ms(o.timeout, "timeout", 1, MAX_TIMEOUT_MS)),
        concurrency=None
        if o.concurrency is None
        else check_int("concurrency", o.concurrency, 1, MAX_CONCURRENCY),
        priority_default=parse_priority(o.priority_default, "priority_default"),
        warning_size=None
        if o.warning_size is None
        else check_int("warning_size", o.warning_size, 1, MAX_WARNING_SIZE),
        dead_letter=None if o.dead_letter is None else check_dead_letter(name, o.dead_letter),
    )


def topic_fields(options: TopicOptions) -> dict[str, str]:
    """The hash fields storing checked options (from check_topic_options); unset ones absent."""
    o = options
    stored: dict[str, str] = {"policy": o.policy}
    if o.dead_letter is not None:
        stored["dead_letter"] = o.dead_letter
    if isinstance(o.retry, RetryPolicy):
        b = o.retry.backoff
        stored.update(
            max=str(o.retry.attempts),
            btype=b.type,
            bdelay=str(b.delay_ms),
            bmax=str(b.max_delay_ms),
            bjit=b.jitter,
        )
    if isinstance(o.timeout, timedelta):
        stored["timeout"] = str(o.timeout // timedelta(milliseconds=1))
    if o.rate_limit is not None:
        stored.update(rl_max=str(o.rate_limit.max), rl_per=str(o.rate_limit.per_ms()))
        if o.rate_limit.per_key:
            stored["rl_key"] = "1"
    if o.concurrency is not None:
        stored["concurrency"] = str(o.concurrency)
    if o.priority_default != 0:
        stored["prio"] = str(o.priority_default)
    if o.warning_size is not None:
        stored["warn"] = str(o.warning_size)
    return stored


def topic_options(stored: Mapping[str, str]) -> TopicOptions:
    """The normalised TopicOptions of a stored configuration hash."""

    def num(field: str) -> int | None:
        value = stored.get(field)
        return int(value) if value not in (None, "") else None

    retry = None
    if num("max") is not None:
        d = JOB_DEFAULTS  # a field missing beside `max` reads as the job hash reads it
        retry = RetryPolicy(
            int(stored["max"]),
            Backoff(  # the stored strings were checked when written
                cast(BackoffType, stored.get("btype") or d["btype"]),
                int(stored.get("bdelay") or d["bdelay"]),
                int(stored.get("bmax") or d["bmax"]),
                cast(Jitter, stored.get("bjit") or d["bjit"]),
            ),
        )
    timeout, rl_max, rl_per = num("timeout"), num("rl_max"), num("rl_per")
    return TopicOptions(
        # written by check_topic_options
        policy=cast(Policy, stored.get("policy") or "standard"),
        retry=retry,
        timeout=None if timeout is None else timedelta(milliseconds=timeout),
        rate_limit=(
            None
            if rl_max is None or rl_per is None
            else RateLimit(rl_max, timedelta(milliseconds=rl_per), stored.get("rl_key") == "1")
        ),
        concurrency=num("concurrency"),
        priority_default=num("prio") or 0,
        warning_size=num("warn"),
        dead_letter=stored.get("dead_letter") or None,
    )


def describe(name: str, options: TopicOptions) -> dict[str, Any]:
    """The JSON form of stored options (`horae topics show --json`): stable field names, ms
    integers."""
    o = options
    rl = o.rate_limit
    return {
        "name": name,
        "policy": o.policy,
        "retry": o.retry.to_dict() if isinstance(o.retry, RetryPolicy) else None,
        "timeout_ms": o.timeout // timedelta(milliseconds=1)
        if isinstance(o.timeout, timedelta)
        else None,
        "rate_limit": None
        if rl is None
        else {"max": rl.max, "per_ms": rl.per_ms(), "per_key": rl.per_key},
        "concurrency": o.concurrency,
        "priority_default": o.priority_default,
        "warning_size": o.warning_size,
        "dead_letter": o.dead_letter,
    }
