"""The example application the compose file, the Kubernetes manifests and the systemd units
run (`horae worker --app example_app`): replace it with your own module of listeners."""

from __future__ import annotations

import logging

from horae import ScheduleArrivedEvent, on_event

log = logging.getLogger("example_app")


@on_event("example.greet")
async def greet(event: ScheduleArrivedEvent) -> None:
    """Log the payload's name: schedule one from the console (POST /api/v1/jobs with
    {"topic": "example.greet", "payload": {"name": "Ada"}}) or with Scheduler.schedule_in."""
    log.info("hello, %s", (event.payload or {}).get("name", "world"))


@on_event("example.heartbeat", every="5m")
async def heartbeat(event: ScheduleArrivedEvent) -> None:
    """A schedule declared beside its listener: the worker keeps it while it serves the topic."""
    log.info("example heartbeat at %s", event.run_at)
