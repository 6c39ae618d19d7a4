-- 0002: remember, per job, the stream id of the latest event folded into its
-- rows, on the job's audit row (written by the same upsert as the row itself,
-- so it costs no extra write). A relay that still holds the job's fold from an
-- earlier batch (its `last` equal to applied_ms/applied_seq, read under the
-- job's index row lock) resumes it with the new events instead of re-reading
-- every event of the job; anything else (another relay wrote the job since, a
-- rolled-back batch, an older event arriving late) makes it rebuild from
-- schedule_events.
ALTER TABLE schedule_audit
    ADD COLUMN applied_ms  bigint,
    ADD COLUMN applied_seq bigint;
