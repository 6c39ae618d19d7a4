-- set_progress: record a running attempt's progress (event.progress), fenced by
-- its lease token: an attempt that lost its lease (recovered by another worker,
-- or settled) writes nothing. One field of the job's hash, replaced each time.
--
-- KEYS[1] job hash
-- ARGV[1] the attempt's lease token
-- ARGV[2] progress "<attempt> <percent> <message>" (scheduler/core/progress.py,
--   checked and clipped by the caller)
--
-- Returns RECORDED (1), LEASE_LOST (-1) the token no longer holds the job.
local job = KEYS[1]
local token, progress = ARGV[1], ARGV[2]
if redis.call('HGET', job, 'token') ~= token or token == '' then return -1 end
redis.call('HSET', job, 'pg', progress)
return 1
