"""A scheduling request as the caller gave it, built once at the facade (schedule_at,
schedule_in, schedule, schedule_many, schedule_cron, replay) and read by validation, flow
control and tracing, instead of a dozen positional arguments passed down each layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """One job to schedule. Values stay raw and unchecked (a topic may be None, a retry a
    mapping): `validation.build_job` checks each and names the field it refuses.

    Attributes:
        topic, tz, payload, retry, metadata, timeout, job_id, dead_letter, key, dedupe,
            priority, after, on_parent_failure: schedule_at's keywords (None: omitted; the
            defaults apply).
        run_at_ms: when, epoch ms (the facade resolved run_at or delay).
        cron: the schedule a tick belongs to ("" for none).
    """

    topic: object
    run_at_ms: int = 0
    tz: Any = "UTC"
    payload: Any = None
    retry: Any = None
    metadata: object = None
    timeout: Any = None
    job_id: object = None
    cron: str = ""
    dead_letter: object = None
    key: object = None
    dedupe: object = None
    priority: object = None
    after: object = None
    on_parent_failure: object = None
