-- 0006: what a job's listeners reported during an attempt (event.progress, event.log),
-- carried by the attempt's settlement event (completed, attempt_succeeded or
-- attempt_failed: fields progress, json {percent, message}, and logs, a json array
-- of that attempt's lines), so audit.attempts answers after Redis has forgotten the job.
-- NULL: the attempt reported none. On the partitioned table the columns are added to
-- every partition.
ALTER TABLE schedule_attempts
    ADD COLUMN progress_percent double precision,
    ADD COLUMN progress_message text,
    ADD COLUMN logs jsonb;
