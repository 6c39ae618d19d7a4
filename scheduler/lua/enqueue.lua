-- enqueue: store a new job, make it due, record `scheduled`, wake workers.
--
-- KEYS[1] job hash        KEYS[2] due zset     KEYS[3] outbox stream
-- KEYS[4] counts hash     KEYS[5] wake channel
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] due_ms  ARGV[4] topic  ARGV[5] payload json
-- ARGV[6] metadata json  ARGV[7] tz  ARGV[8] run_at_ms  ARGV[9] max_attempts
-- ARGV[10] backoff_type  ARGV[11] backoff_delay_ms  ARGV[12] timeout_ms
-- ARGV[13] traceparent ("" for none)  ARGV[14] cron schedule name ("" for none)
--
-- Returns 1 when created, or DUPLICATE (-10) when a job with this id exists
-- (its fields are left untouched: ids are idempotency keys).
local job = {
  id = ARGV[1], due = ARGV[3], topic = ARGV[4], payload = ARGV[5], meta = ARGV[6],
  tz = ARGV[7], run_at = ARGV[8], max = ARGV[9], btype = ARGV[10], bdelay = ARGV[11],
  timeout = ARGV[12], trace = ARGV[13], cron = ARGV[14],
}
if create_job(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], job) then
  return 1
end
return -10
