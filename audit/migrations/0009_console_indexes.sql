-- 0009: indexes for the console's overview (README: Console; bench/console_pages.py measures
-- them on 4.5 million jobs and 10 million attempts).
--
-- Jobs completed since an instant, per topic (query finished_last_hour): the completed jobs
-- by completion time, carrying the topic, so the last hour is one short range of this index
-- (index-only where the pages are all-visible) instead of every attempt finished in the
-- hour joined back to its job by primary key. Partial: only completed jobs are in it.
CREATE INDEX schedule_audit_completed ON schedule_audit (completed_at) INCLUDE (topic)
    WHERE status = 'completed';

-- The failure baseline of the analytics page (query failure_baseline) asks for a range of
-- days across every topic; the primary key (topic, day) leads with the topic.
CREATE INDEX schedule_failure_stats_day ON schedule_failure_stats (day);
