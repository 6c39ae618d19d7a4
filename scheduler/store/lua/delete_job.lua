-- delete_job: remove a job that is not running, whatever its state: its hash,
-- its payload key, its log list, its due (or priority, or parked) or retention entry, its
-- flow-control slots (_flow.lua) and its count. Its id is free
-- again (scheduling it creates a new job). `deleted` records who did it.
--
-- Jobs waiting for it (after=) count it as failed (_deps.lua); its children set and its
-- parents' results go with it.
--
-- KEYS[1] job hash  KEYS[2] due zset  KEYS[3] completed zset  KEYS[4] failed zset
-- KEYS[5] cancelled zset  KEYS[6] outbox  KEYS[7] counts hash
-- KEYS[8] done channel (Scheduler.wait callers learn the job is gone: notify_done)
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] actor
--
-- Returns (scripts.OperationCode, ScriptCode) DELETED (2) gone, NOT_FOUND (-3)
-- no such job, RUNNING (-6) an attempt is in flight (also when cancelled meanwhile).
local job, outbox, counts = KEYS[1], KEYS[6], KEYS[7]
local sets = { KEYS[2], KEYS[3], KEYS[4], KEYS[5] }  -- due and retention: the id is in at most one
local id, now, actor = ARGV[1], ARGV[2], ARGV[3]
local f = redis.call('HMGET', job, 'state', 'topic', 'attempts', 'token', 'prio', 'fl', 'w', 'hc')
local state = f[1]
if not state then return -3 end
if state == 'running' or (f[4] and f[4] ~= '') then return -6 end
for _, set in ipairs(sets) do
  redis.call('ZREM', set, id)
end
local ns = ns_of(job)
redis.call('ZREM', wait_set('', f[5], f[2], KEYS[2], ''), id)  -- a priority's due set
redis.call('ZREM', ns .. K_PARKED .. f[2], id)  -- parked by a limit
if f[6] == '1' then flow_leave(ns, id, flow_fields(job), state, false, now) end
redis.call('ZREM', ns .. K_WAITING_PARENTS, id)  -- a job waiting for parents (after=)
-- jobs still waiting for this one take it as failed: each its on_parent_failure (_deps.lua)
if f[8] == '1' then deps_parent_ended(ns, id, false, '', now, outbox, counts) end
move_count(counts, f[2], state, nil)
delete_job(job)
emit(outbox, 'e', EV_DELETED, 'id', id, 'ts', now, 'a', f[3] or '0', 'from', state, 'actor', actor)
notify_done(f[7], KEYS[8], id)
return 2
