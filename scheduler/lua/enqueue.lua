-- enqueue: store a new job, make it due, record `scheduled`, and either wake
-- workers or, when the caller names its own worker and nothing else is due,
-- lease the job to that worker at once (no wake-up message, no claim call).
--
-- KEYS[1] job hash        KEYS[2] due zset     KEYS[3] outbox stream
-- KEYS[4] counts hash     KEYS[5] wake channel KEYS[6] active zset
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] due_ms  ARGV[4] topic  ARGV[5] payload json
-- ARGV[6] metadata json  ARGV[7] tz  ARGV[8] run_at_ms  ARGV[9] max_attempts
-- ARGV[10] backoff_type  ARGV[11] backoff_delay_ms  ARGV[12] timeout_ms
-- ARGV[13] traceparent ("" for none)  ARGV[14] cron schedule name ("" for none)
-- ARGV[15] worker id to lease the job to when it is due now and no other job
--          is due ("" for none: always queue)  ARGV[16] lease_ms
-- ARGV[17] backoff_max_delay_ms  ARGV[18] backoff_jitter (none|full|equal)
-- ARGV[19] the job's own dead-letter topic ("" for none: its topic's, if configured)
--
-- Returns (scripts.EnqueueCode, ScriptCode) { QUEUED (1) } when created and queued,
-- { LEASED (2), attempt, token } when created and leased to ARGV[15], or
-- { DUPLICATE (-10) } when a job with this id exists (its fields are left
-- untouched: ids are idempotency keys).
local job = {
  id = ARGV[1], due = ARGV[3], topic = ARGV[4], payload = ARGV[5], meta = ARGV[6],
  tz = ARGV[7], run_at = ARGV[8], max = ARGV[9], btype = ARGV[10], bdelay = ARGV[11],
  timeout = ARGV[12], trace = ARGV[13], cron = ARGV[14], bmax = ARGV[17], bjit = ARGV[18],
  dlq = ARGV[19],
}
local key, due, now, worker = KEYS[1], KEYS[2], ARGV[2], ARGV[15]
if not create_job(key, due, KEYS[3], KEYS[4], now, job) then
  return { -10 }
end
if worker ~= '' and tonumber(job.due) <= tonumber(now) then
  -- Only while nothing else is due: a job waiting longer keeps its place.
  local first = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', '0', '2')
  if #first == 1 then
    local attempt, token = lease_job(key, job.id, job.topic, 'scheduled', job.due, worker, now,
      int(tonumber(now) + tonumber(ARGV[16])), due, KEYS[6], KEYS[3], KEYS[4])
    return { 2, attempt, token }
  end
end
wake_if_first(due, KEYS[5], job.id, job.due)
return { 1 }
