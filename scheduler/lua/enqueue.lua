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
local job, due, outbox, counts, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, now, due_ms, topic = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('EXISTS', job) == 1 then
  return -10
end

redis.call('HSET', job,
  'topic', topic, 'payload', ARGV[5], 'meta', ARGV[6], 'tz', ARGV[7],
  'run_at', ARGV[8], 'due', due_ms, 'state', 'scheduled', 'attempts', 0,
  'max', ARGV[9], 'btype', ARGV[10], 'bdelay', ARGV[11], 'timeout', ARGV[12],
  'created', now, 'trace', ARGV[13], 'cron', ARGV[14])
redis.call('ZADD', due, due_ms, id)
move_count(counts, topic, nil, 'scheduled')
redis.call('XADD', outbox, '*', 'e', 'scheduled', 'id', id, 'ts', now, 'a', 0,
  'topic', topic, 'run_at', ARGV[8], 'due', due_ms, 'tz', ARGV[7],
  'payload', ARGV[5], 'metadata', ARGV[6], 'max_attempts', ARGV[9],
  'backoff_type', ARGV[10], 'backoff_delay', ARGV[11], 'timeout_ms', ARGV[12],
  'trace', ARGV[13], 'cron', ARGV[14])
wake_if_first(due, wake, id, due_ms)
return 1
