-- upsert_cron: create or update a named recurring schedule (a cron expression,
-- or an interval). An unchanged trigger (expression, zone, interval, jitter)
-- keeps the stored next fire (every process may call schedule_cron at startup,
-- every worker upserts its declared schedules, without double-firing); a
-- changed one takes the next fire computed by the caller. A schedule keeps its
-- origin: one declared beside a listener (`declared` 1) is never taken over by
-- schedule_cron, nor one of schedule_cron's by a declaration.
--
-- KEYS[1] cron hash  KEYS[2] crons zset (active, by next fire)  KEYS[3] names set
-- KEYS[4] wake channel  KEYS[5] declared names set
-- ARGV[1] name  ARGV[2] now_ms  ARGV[3] expr ("" for an interval)  ARGV[4] tz  ARGV[5] topic
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
-- ARGV[21] interval ms ("" for a cron expression)  ARGV[22] jitter ms ("" for none)
-- ARGV[23] "1" declared beside a listener, "0" schedule_cron's (a hash without the
--          field is schedule_cron's)
--
-- Returns (scripts.UpsertCode) CREATED (1), RESCHEDULED (2) its trigger changed,
-- UPDATED (0) updated in place; OTHER_ORIGIN (-12) the name belongs to a schedule
-- of the other origin (nothing written).
local cron, crons, names, wake, declared = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local name, now, expr, tz, next_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[13]
local cur = redis.call('HMGET', cron, 'expr', 'tz', 'paused', 'every', 'jit', 'declared')
if cur[1] and (cur[6] or '0') ~= ARGV[23] then return -12 end
redis.call('HSET', cron, 'expr', expr, 'tz', tz, 'topic', ARGV[5], 'payload', ARGV[6], 'meta', ARGV[7],
  'max', ARGV[8], 'btype', ARGV[9], 'bdelay', ARGV[10], 'timeout', ARGV[11], 'misfire', ARGV[12],
  'updated', now, 'trace', ARGV[14], 'bmax', ARGV[15], 'bjit', ARGV[16])
for field, value in pairs({ key = ARGV[17], prio = ARGV[18], dd = ARGV[19], ddw = ARGV[20], every = ARGV[21],
                            jit = ARGV[22] }) do
  if value == '' then redis.call('HDEL', cron, field) else redis.call('HSET', cron, field, value) end
end
if ARGV[23] == '1' then
  redis.call('HSET', cron, 'declared', 1)
  redis.call('SADD', declared, name)
end
redis.call('SADD', names, name)
local result = 0
if not cur[1] then
  redis.call('HSET', cron, 'created', now, 'paused', 0, 'last_run', '')
  result = 1
elseif cur[1] ~= expr or cur[2] ~= tz or (cur[4] or '') ~= ARGV[21] or (cur[5] or '') ~= ARGV[22] then
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
