-- 0004: an attempt may end `invalid_payload` (its topic's payload schema refused
-- the payload; the job completes without retrying, the refusal in error_type /
-- error_message). The outcome check is widened in place: code that never writes
-- the new outcome runs unchanged against it. On the partitioned table the
-- constraint is inherited, so dropping and adding it here covers every partition.
ALTER TABLE schedule_attempts
    DROP CONSTRAINT schedule_attempts_outcome_check,
    ADD CONSTRAINT schedule_attempts_outcome_check
        CHECK (outcome IN ('succeeded', 'failed', 'timed_out', 'worker_lost', 'no_listener', 'invalid_payload'));
