"""What a running attempt reports (its progress and log lines, fenced by its lease
token) and what Scheduler.wait needs: a job's waiter flag and the done channel."""

from __future__ import annotations

from collections.abc import Callable

from redis.exceptions import RedisError

from scheduler.core.progress import LOG_LINES
from scheduler.store.base import StoreBase
from scheduler.store.scripts import ScriptCode
from scheduler.store.wire import Subscription


class ProgressStore(StoreBase):
    """lua/set_progress.lua, lua/append_log.lua and lua/watch_job.lua, and the done channel."""

    async def set_progress(self, job_id: str, token: str, progress: str) -> int:
        """Replace the job's progress (`progress.progress_text`'s form) if `token` still holds
        its lease; ReportCode.RECORDED or ScriptCode.LEASE_LOST."""
        return int(await self._run("set_progress", [self.keys.job(job_id)], [token, progress]))

    async def append_log(self, job_id: str, token: str, entry: str) -> int:
        """Append one entry (`progress.log_entry`'s form) to the job's log, keeping the last
        LOG_LINES, if `token` still holds its lease; ReportCode.RECORDED or
        ScriptCode.LEASE_LOST."""
        k = self.keys
        return int(
            await self._run(
                "append_log", [k.job(job_id), k.logs(job_id)], [token, entry, LOG_LINES]
            )
        )

    async def watch_job(self, job_id: str) -> str | None:
        """Flag the job as waited for (its end is then published on the done channel) and
        return its state; None when there is no such job."""
        reply = await self._run("watch_job", [self.keys.job(job_id)], [])
        if reply == ScriptCode.NOT_FOUND:
            return None
        return str(reply)

    async def subscribe_done(
        self, on_message: Callable[[bytes | None, bytes | None], None]
    ) -> Subscription:
        """Call `on_message(channel, job id)` for every waited job that ends or is removed, and
        `on_message(None, None)` after a lost subscription is back (messages may be lost)."""
        sub = Subscription(self.wire.pubsub_endpoint, [self.keys.done], on_message)
        try:
            await sub.start()
        except (RedisError, OSError) as exc:
            raise self.storage_error(f"subscription to {self.keys.done}", exc) from exc
        return sub
