-- 0011: a job's result (what its listeners returned: one listener's value, or a mapping
-- listener name -> value), carried by the settlement event of a successful attempt
-- (completed or attempt_succeeded: field result, JSON), kept on that attempt's row so
-- audit.attempts answers after Redis has forgotten the job. NULL: the attempt returned
-- nothing, failed, or has not finished. On the partitioned table the column is added to
-- every partition.
ALTER TABLE schedule_attempts
    ADD COLUMN result jsonb;
