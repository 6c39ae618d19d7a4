"""Retry policies: validated at creation, decided per failed attempt. Pure.

Defaults (config [retry]): 5 attempts in total, exponential backoff from
30 s: retries after 30 s, 1 min, 2 min, 4 min; no gap over max_delay (1 h),
no jitter. Bounds: attempts 1..20, delay 1,000..3,600,000 ms, max_delay
1,000..86,400,000 ms and >= delay. Anything else is RetryPolicyInvalid
(code SCHEDULE_RETRY_POLICY_INVALID) and nothing is stored.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from scheduler.core.errors import DoNotRetry, Retry, RetryPolicyInvalid, shown

MIN_ATTEMPTS, MAX_ATTEMPTS = 1, 20
MIN_DELAY_MS, MAX_DELAY_MS = 1_000, 3_600_000
MIN_MAX_DELAY_MS, MAX_MAX_DELAY_MS = 1_000, 86_400_000
DEFAULT_DELAY_MS = 30_000  # the first retry's wait, when a policy names none
DEFAULT_MAX_DELAY_MS = 3_600_000
BACKOFF_TYPES = ("exponential", "fixed")
JITTER_MODES = ("none", "full", "equal")

BackoffType = Literal["exponential", "fixed"]
Jitter = Literal["none", "full", "equal"]
# A uniform draw from [0, 1); injectable so tests are deterministic.
Rand = Callable[[], float]
# The keys of the plain form's "backoff" mapping.
BACKOFF_KEYS = ("type", "delay", "max_delay", "jitter")


def _check_int(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RetryPolicyInvalid(
            f"{field} must be an integer from {low:,} to {high:,}; "
            f"got {shown(value)} ({type(value).__name__})",
            field=field,
        )
    if not low <= value <= high:
        raise RetryPolicyInvalid(
            f"{field} must be from {low:,} to {high:,}; got {value:,}", field=field
        )
    return value


@dataclass(frozen=True)
class Backoff:
    """How long to wait before retry k: fixed = delay; exponential = delay * 2^(k-1);
    then capped at max_delay_ms, then jittered (AWS's definitions, d the capped delay):
    none = d; full = uniform(0, d); equal = d/2 + uniform(0, d/2); a jittered delay is
    never below MIN_DELAY_MS."""

    type: BackoffType = "exponential"
    delay_ms: int = DEFAULT_DELAY_MS
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    jitter: Jitter = "none"

    def __post_init__(self) -> None:
        if self.type not in BACKOFF_TYPES:
            raise RetryPolicyInvalid(
                f"backoff.type must be one of {', '.join(BACKOFF_TYPES)}; got {shown(self.type)}",
                field="backoff.type",
            )
        _check_int("backoff.delay", self.delay_ms, MIN_DELAY_MS, MAX_DELAY_MS)
        _check_int("backoff.max_delay", self.max_delay_ms, MIN_MAX_DELAY_MS, MAX_MAX_DELAY_MS)
        if self.max_delay_ms < self.delay_ms:
            raise RetryPolicyInvalid(
                f"backoff.max_delay must be >= backoff.delay "
                f"({self.delay_ms:,}); got {self.max_delay_ms:,}",
                field="backoff.max_delay",
            )
        if self.jitter not in JITTER_MODES:
            raise RetryPolicyInvalid(
                f"backoff.jitter must be one of "
                f"{', '.join(JITTER_MODES)}; got {shown(self.jitter)}",
                field="backoff.jitter",
            )

    def capped_delay(self, retry: int) -> int:
        """Milliseconds before retry number `retry` (1 = the first retry), capped, before jitter."""
        if self.type == "fixed":
            return self.delay_ms
        # delay * 2^(retry-1), exact (retry <= MAX_ATTEMPTS keeps it small).
        return min(self.delay_ms << max(0, retry - 1), self.max_delay_ms)

    def delay_for_retry(self, retry: int, rand: Rand = random.random) -> int:
        """Milliseconds before retry number `retry` (1 = the first retry): capped, then jittered.

        Args:
            retry: 1 for the first retry.
            rand: a uniform draw from [0, 1) (only read when jitter is not "none").
        """
        d = self.capped_delay(retry)
        if self.jitter == "none":
            return d
        if self.jitter == "full":
            return max(MIN_DELAY_MS, int(rand() * d))
        half = d // 2
        return max(MIN_DELAY_MS, half + int(rand() * (d - half)))


@dataclass(frozen=True)
class RetryDecision:
    """Retry the job after delay_ms. `requested_ms` is set when a listener's
    Retry(delay=) asked for a delay outside the bounds and delay_ms is the clamped one."""

    delay_ms: int
    requested_ms: float | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Total attempts (the first included) and the backoff between them."""

    attempts: int = 5
    backoff: Backoff = Backoff()

    def __post_init__(self) -> None:
        _check_int("attempts", self.attempts, MIN_ATTEMPTS, MAX_ATTEMPTS)
        if not isinstance(self.backoff, Backoff):
            raise RetryPolicyInvalid(
                f"backoff must be a Backoff or a mapping with "
                f"type and delay; got {shown(self.backoff)}",
                field="backoff",
            )

    def decide(
        self, attempt: int, exc: BaseException | None = None, rand: Rand = random.random
    ) -> RetryDecision | None:
        """After attempt number `attempt` failed with `exc`: retry when, or None for terminal.

        A listener's Retry(delay=seconds) picks its own delay (no jitter), clamped into
        [MIN_DELAY_MS, backoff.max_delay_ms] (the decision then carries requested_ms);
        DoNotRetry ends the job.
        """
        if isinstance(exc, DoNotRetry) or attempt >= self.attempts:
            return None
        if isinstance(exc, Retry) and exc.delay is not None:
            return self._listener_delay(exc.delay)
        return RetryDecision(self.backoff.delay_for_retry(attempt, rand))

    def _listener_delay(self, delay_s: float) -> RetryDecision:
        requested = float(delay_s) * 1000
        low, high = MIN_DELAY_MS, self.backoff.max_delay_ms
        if math.isnan(requested):
            return RetryDecision(low, requested)
        if low <= requested <= high:
            return RetryDecision(int(requested))
        return RetryDecision(low if requested < low else high, requested)

    def to_dict(self) -> dict[str, Any]:
        """The plain form: {"attempts": n, "backoff": {"type": t, "delay": ms, "max_delay": ms,
        "jitter": j}}."""
        b = self.backoff
        return {
            "attempts": self.attempts,
            "backoff": {
                "type": b.type,
                "delay": b.delay_ms,
                "max_delay": b.max_delay_ms,
                "jitter": b.jitter,
            },
        }


def parse_retry(value: RetryPolicy | Mapping[str, Any] | None, default: RetryPolicy) -> RetryPolicy:
    """Accept a RetryPolicy, the plain dict form, or None (the default).

    Raises:
        RetryPolicyInvalid: naming the field, the value and what is allowed.
    """
    if value is None:
        return default
    if isinstance(value, RetryPolicy):
        return value
    if not isinstance(value, Mapping):
        raise RetryPolicyInvalid(
            f"retry must be a RetryPolicy or a mapping like "
            f'{{"attempts": 3, "backoff": {{"type": "fixed", '
            f'"delay": 10000}}}}; got {shown(value)}',
            field="retry",
        )
    unknown = set(value) - {"attempts", "backoff"}
    if unknown:
        raise RetryPolicyInvalid(
            f"retry has unknown keys {sorted(unknown)}; allowed: attempts, backoff", field="retry"
        )
    backoff_raw = value.get("backoff", None)
    if backoff_raw is None:
        backoff = default.backoff
    elif isinstance(backoff_raw, Mapping):
        extra = set(backoff_raw) - set(BACKOFF_KEYS)
        if extra:
            raise RetryPolicyInvalid(
                f"retry.backoff has unknown keys {sorted(extra)}; "
                f"allowed: {', '.join(BACKOFF_KEYS)}",
                field="backoff",
            )
        d = default.backoff
        backoff = Backoff(
            backoff_raw.get("type", d.type),
            backoff_raw.get("delay", d.delay_ms),
            backoff_raw.get("max_delay", d.max_delay_ms),
            backoff_raw.get("jitter", d.jitter),
        )
    elif isinstance(backoff_raw, Backoff):
        backoff = backoff_raw
    else:
        raise RetryPolicyInvalid(
            f'retry.backoff must be a mapping {{"type": ..., '
            f'"delay": ms, "max_delay": ms, "jitter": ...}}; '
            f"got {shown(backoff_raw)}",
            field="backoff",
        )
    return RetryPolicy(attempts=value.get("attempts", default.attempts), backoff=backoff)
