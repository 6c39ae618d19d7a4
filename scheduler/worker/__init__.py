"""A worker: the claim loop, attempts, settlement, heartbeat and housekeeping, cron ticks."""
