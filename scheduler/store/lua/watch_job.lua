-- watch_job: register a Scheduler.wait caller on a job: flag it (field w), so
-- every script that ends or removes it publishes its id on the done channel
-- (notify_done), and return its state read in the same call. The caller
-- subscribes first: a job that ends after this call is published, one that
-- ended before shows its state here, so no end is missed. The flag stays (a
-- job it outlives costs one message when it ends).
--
-- KEYS[1] job hash
--
-- Returns the job's state (scheduled, running, retrying, completed, failed,
-- cancelled), or NOT_FOUND (-3) no such job.
local job = KEYS[1]
local state = redis.call('HGET', job, 'state')
if not state then return -3 end
redis.call('HSET', job, 'w', '1')
return state
