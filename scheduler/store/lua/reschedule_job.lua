-- reschedule_job: move a waiting (scheduled or retrying) job to a new time.
-- run_at becomes the new time and the job is due then (now when it is past);
-- workers are woken when it becomes the earliest due job.
--
-- KEYS[1] job hash  KEYS[2] due zset  KEYS[3] outbox  KEYS[4] wake channel
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] run_at_ms  ARGV[4] tz  ARGV[5] actor
--
-- Returns (scripts.OperationCode, ScriptCode) RESCHEDULED (3) moved,
-- NOT_FOUND (-3) no such job, WRONG_STATE (-7) running or finished.
local job, due, outbox, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, now, run_at, tz, actor = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local f = redis.call('HMGET', job, 'state', 'attempts', 'topic', 'prio')
local state = f[1]
if not state then return -3 end
if state ~= 'scheduled' and state ~= 'retrying' then return -7 end
local due_ms = run_at
if tonumber(run_at) < tonumber(now) then due_ms = now end
redis.call('HSET', job, 'run_at', run_at)
if due_ms == run_at then redis.call('HDEL', job, 'due') else redis.call('HSET', job, 'due', due_ms) end
if tz == DEFAULTS.tz then redis.call('HDEL', job, 'tz') else redis.call('HSET', job, 'tz', tz) end
redis.call('ZREM', ns_of(job) .. K_PARKED .. f[3], id)  -- parked by a limit: due again
local set = wait_add('', f[4], f[3], due, '', due_ms, id)
emit(outbox, 'e', EV_RESCHEDULED, 'id', id, 'ts', now, 'a', f[2] or '0', 'run_at', run_at, 'due', due_ms,
  'tz', tz, 'actor', actor)
wake_if_first(set, wake, id, due_ms)
return 3
