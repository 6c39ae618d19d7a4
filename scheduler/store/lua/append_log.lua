-- append_log: append one log line of a running attempt (event.log) to its job's
-- log list, keeping the last lines only, fenced by the attempt's lease token
-- (an attempt that lost its lease writes nothing). Flags the job (field lg), so
-- its settlement carries the attempt's lines to the outbox (attempt_report) and
-- only a job that logged pays for reading them.
--
-- KEYS[1] job hash  KEYS[2] its log list
-- ARGV[1] the attempt's lease token
-- ARGV[2] entry "<attempt> <ms> <line>" (scheduler/core/progress.py, clipped by the caller)
-- ARGV[3] lines kept (the oldest beyond are dropped)
--
-- Returns RECORDED (1), LEASE_LOST (-1) the token no longer holds the job.
local job, logs = KEYS[1], KEYS[2]
local token, entry, keep = ARGV[1], ARGV[2], tonumber(ARGV[3])
local f = redis.call('HMGET', job, 'token', 'lg')
if f[1] ~= token or token == '' then return -1 end
redis.call('RPUSH', logs, entry)
redis.call('LTRIM', logs, -keep, -1)
if not f[2] then redis.call('HSET', job, 'lg', '1') end
return 1
