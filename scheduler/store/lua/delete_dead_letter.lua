-- delete_dead_letter: remove a dead letter: its hash, its payload key, its
-- entry in its dead-letter set and its count; `deleted` records who did it.
--
-- KEYS[1] job hash  KEYS[2] dead-letter set  KEYS[3] outbox  KEYS[4] counts hash
-- KEYS[5] done channel (Scheduler.wait callers learn the job is gone: notify_done)
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] actor
--
-- Returns (scripts.OperationCode, ScriptCode) DELETED (2) gone, NOT_FOUND (-3)
-- no such dead letter in this set.
local job, set, outbox, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, now, actor = ARGV[1], ARGV[2], ARGV[3]
if not redis.call('ZSCORE', set, id) then return -3 end
redis.call('ZREM', set, id)
local f = redis.call('HMGET', job, 'state', 'topic', 'attempts', 'w')
if not f[1] then return -3 end
move_count(counts, f[2], f[1], nil)
delete_job(job)
emit(outbox, 'e', EV_DELETED, 'id', id, 'ts', now, 'a', f[3] or '0', 'from', f[1], 'actor', actor)
notify_done(f[4], KEYS[5], id)
return 2
