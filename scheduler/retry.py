"""Retry policies: validated at creation, decided per failed attempt. Pure.

Defaults (config [retry]): 5 attempts in total, exponential backoff from
30 s: retries after 30 s, 1 min, 2 min, 4 min. Bounds: attempts 1..20,
delay 1,000..3,600,000 ms. Anything else is RetryPolicyInvalid
(code SCHEDULE_RETRY_POLICY_INVALID) and nothing is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from scheduler.errors import DoNotRetry, Retry, RetryPolicyInvalid

MIN_ATTEMPTS, MAX_ATTEMPTS = 1, 20
MIN_DELAY_MS, MAX_DELAY_MS = 1_000, 3_600_000
BACKOFF_TYPES = ("exponential", "fixed")

BackoffType = Literal["exponential", "fixed"]


def _check_int(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RetryPolicyInvalid(
            f"{field} must be an integer from {low:,} to {high:,}; got {value!r} ({type(value).__name__})",
            field=field,
        )
    if not low <= value <= high:
        raise RetryPolicyInvalid(f"{field} must be from {low:,} to {high:,}; got {value:,}", field=field)
    return value


@dataclass(frozen=True)
class Backoff:
    """How long to wait before retry k: fixed = delay; exponential = delay * 2^(k-1)."""

    type: BackoffType = "exponential"
    delay_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.type not in BACKOFF_TYPES:
            raise RetryPolicyInvalid(
                f"backoff.type must be one of {', '.join(BACKOFF_TYPES)}; got {self.type!r}", field="backoff.type"
            )
        _check_int("backoff.delay", self.delay_ms, MIN_DELAY_MS, MAX_DELAY_MS)

    def delay_for_retry(self, retry: int) -> int:
        """Milliseconds before retry number `retry` (1 = the first retry)."""
        if self.type == "fixed":
            return self.delay_ms
        return int(self.delay_ms * 2 ** (retry - 1))


@dataclass(frozen=True)
class RetryDecision:
    """Retry the job after delay_ms."""

    delay_ms: int


@dataclass(frozen=True)
class RetryPolicy:
    """Total attempts (the first included) and the backoff between them."""

    attempts: int = 5
    backoff: Backoff = Backoff()

    def __post_init__(self) -> None:
        _check_int("attempts", self.attempts, MIN_ATTEMPTS, MAX_ATTEMPTS)
        if not isinstance(self.backoff, Backoff):
            raise RetryPolicyInvalid(
                f"backoff must be a Backoff or a mapping with type and delay; got {self.backoff!r}", field="backoff"
            )

    def decide(self, attempt: int, exc: BaseException | None = None) -> RetryDecision | None:
        """After attempt number `attempt` failed with `exc`: retry when, or None for terminal.

        A listener's Retry(delay=seconds) picks its own delay; DoNotRetry ends the job.
        """
        if isinstance(exc, DoNotRetry) or attempt >= self.attempts:
            return None
        if isinstance(exc, Retry) and exc.delay is not None:
            return RetryDecision(max(0, int(exc.delay * 1000)))
        return RetryDecision(self.backoff.delay_for_retry(attempt))

    def to_dict(self) -> dict[str, Any]:
        """The plain form: {"attempts": n, "backoff": {"type": t, "delay": ms}}."""
        return {"attempts": self.attempts, "backoff": {"type": self.backoff.type, "delay": self.backoff.delay_ms}}


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
            f'{{"attempts": 3, "backoff": {{"type": "fixed", "delay": 10000}}}}; got {value!r}',
            field="retry",
        )
    unknown = set(value) - {"attempts", "backoff"}
    if unknown:
        raise RetryPolicyInvalid(f"retry has unknown keys {sorted(unknown)}; allowed: attempts, backoff", field="retry")
    backoff_raw = value.get("backoff", None)
    if backoff_raw is None:
        backoff = default.backoff
    elif isinstance(backoff_raw, Mapping):
        extra = set(backoff_raw) - {"type", "delay"}
        if extra:
            raise RetryPolicyInvalid(
                f"retry.backoff has unknown keys {sorted(extra)}; allowed: type, delay", field="backoff"
            )
        backoff = Backoff(
            backoff_raw.get("type", default.backoff.type), backoff_raw.get("delay", default.backoff.delay_ms)
        )
    elif isinstance(backoff_raw, Backoff):
        backoff = backoff_raw
    else:
        raise RetryPolicyInvalid(
            f'retry.backoff must be a mapping {{"type": ..., "delay": ms}}; got {backoff_raw!r}', field="backoff"
        )
    return RetryPolicy(attempts=value.get("attempts", default.attempts), backoff=backoff)
