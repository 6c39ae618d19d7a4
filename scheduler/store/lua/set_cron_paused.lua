-- set_cron_paused: pause a schedule (no tick fires while paused) or resume it
-- at the next fire after now (ticks that passed while paused do not run).
--
-- KEYS[1] cron hash  KEYS[2] crons zset  KEYS[3] wake channel
-- ARGV[1] name  ARGV[2] "1" pause / "0" resume  ARGV[3] next fire ms (resume)
-- ARGV[4] now_ms
--
-- Returns (scripts.PauseCode, ScriptCode) CHANGED (1), UNCHANGED (0) already in
-- that state, NOT_FOUND (-3) no such schedule.
local cron, crons, wake = KEYS[1], KEYS[2], KEYS[3]
local name, pause, next_ms = ARGV[1], ARGV[2], ARGV[3]
local paused = redis.call('HGET', cron, 'paused')
if not paused then return -3 end
if paused == pause then return 0 end
redis.call('HSET', cron, 'paused', pause, 'updated', ARGV[4])
if pause == '1' then
  redis.call('ZREM', crons, name)
else
  redis.call('HSET', cron, 'next', next_ms)
  redis.call('ZADD', crons, next_ms, name)
  redis.call('PUBLISH', wake, next_ms)
end
return 1
