"""The folds a relay keeps between batches (audit/relay/fold.py: JobFold), so a job's next
events resume its fold instead of re-reading and re-folding every stored event of it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime

import scheduler.core.outbox as outbox
from audit.relay.fold import JobFold
from audit.relay.streamid import StreamId

__all__ = ["FoldCache"]


class FoldCache:
    """The folds of jobs this relay wrote last, so the next batch of a job resumes its
    fold instead of re-reading and re-folding all of the job's stored events.

    A fold is only resumed when the job's audit row (read once its index row is
    locked) says the latest event folded into it is the fold's own last event:
    anything another relay or a rolled-back batch did since shows up there as a
    mismatch. Finished jobs are dropped (they rarely get another event); the rest
    are evicted oldest first.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._folds: OrderedDict[str, JobFold] = OrderedDict()

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._folds

    def resume(
        self, job_id: str, created_at: datetime, applied: StreamId | None, new: Iterable[StreamId]
    ) -> JobFold | None:
        """The cached fold if it can take `new` as they stand, else None (fold from scratch)."""
        fold = self._folds.pop(job_id, None)
        if (
            fold is None
            or applied is None
            or fold.last != applied
            or fold.job["created_at"] != created_at
        ):
            return None
        if any(sid <= applied for sid in new):  # an older event arrived late
            return None
        return fold

    def keep(self, fold: JobFold) -> None:
        """Remember a fold just written (called before commit: resume() re-checks it)."""
        job_id = fold.job["id"]
        if fold.job["status"] in outbox.TERMINAL_STATUSES or self._size <= 0:
            self._folds.pop(job_id, None)
            return
        self._folds[job_id] = fold
        self._folds.move_to_end(job_id)
        while len(self._folds) > self._size:
            self._folds.popitem(last=False)
