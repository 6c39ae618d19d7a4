-- upsert_cron: create or update a named cron schedule. An unchanged
-- expression and zone keep the stored next fire (every process may call
-- schedule_cron at startup without double-firing); a changed one takes the
-- next fire computed by the caller.
--
-- KEYS[1] cron hash  KEYS[2] crons zset (active, by next fire)  KEYS[3] names set
-- KEYS[4] wake channel
-- ARGV[1] name  ARGV[2] now_ms  ARGV[3] expr  ARGV[4] tz  ARGV[5] topic
-- ARGV[6] payload json  ARGV[7] metadata json  ARGV[8] max_attempts
-- ARGV[9] backoff_type  ARGV[10] backoff_delay_ms  ARGV[11] timeout_ms
-- ARGV[12] misfire (coalesce|skip|all)  ARGV[13] next fire ms for a new/changed schedule
-- ARGV[14] traceparent of the upsert (ticks link their new traces to it)
-- ARGV[15] backoff_max_delay_ms  ARGV[16] backoff_jitter (none|full|equal)
-- ARGV[17] key of its ticks ("" = the schedule's name)  ARGV[18] priority ("" = the topic's)
-- ARGV[19] dedupe key of its ticks ("" for none)  ARGV[20] its window ms ("" for none:
--          until the tick holding it finishes)
--          (always stored here; a hash written before them has neither, and its
--          ticks take the defaults: see fire_crons.lua)
--
-- Returns (scripts.UpsertCode) CREATED (1), RESCHEDULED (2) expression or zone
-- changed, UPDATED (0) updated in place.
local cron, crons, names, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local name, now, expr, tz, next_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[13]
local cur = redis.call('HMGET', cron, 'expr', 'tz', 'paused')
redis.call('HSET', cron, 'expr', expr, 'tz', tz, 'topic', ARGV[5], 'payload', ARGV[6], 'meta', ARGV[7],
  'max', ARGV[8], 'btype', ARGV[9], 'bdelay', ARGV[10], 'timeout', ARGV[11], 'misfire', ARGV[12],
  'updated', now, 'trace', ARGV[14], 'bmax', ARGV[15], 'bjit', ARGV[16])
for field, value in pairs({ key = ARGV[17], prio = ARGV[18], dd = ARGV[19], ddw = ARGV[20] }) do
  if value == '' then redis.call('HDEL', cron, field) else redis.call('HSET', cron, field, value) end
end
redis.call('SADD', names, name)
local result = 0
if not cur[1] then
  redis.call('HSET', cron, 'created', now, 'paused', 0, 'last_run', '')
  result = 1
elseif cur[1] ~= expr or cur[2] ~= tz then
  result = 2
end
if result > 0 then
  redis.call('HSET', cron, 'next', next_ms)
  if cur[3] ~= '1' then
    redis.call('ZADD', crons, next_ms, name)
    redis.call('PUBLISH', wake, next_ms)
  end
end
return result
