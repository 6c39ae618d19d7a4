-- cancel: stop all future attempts of a job. A waiting or retrying job ends
-- cancelled now; a running one is marked cancelled and its attempt finishes
-- (complete/fail then record the attempt without changing the status).
--
-- KEYS[1] job hash  KEYS[2] due zset  KEYS[3] cancelled zset  KEYS[4] outbox
-- KEYS[5] counts hash  KEYS[6] done channel (a job someone waits for is published
--   there when cancelled, running or not: notify_done)
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] actor who asked ("" for none: no actor field)
-- ARGV[4] dead-letter set key prefix (a waiting dead letter leaves its set: wait_set)
--
-- A job waiting for parents (after=) is cancelled as a waiting one; jobs waiting for
-- the cancelled one apply their on_parent_failure (_deps.lua).
--
-- Returns (scripts.CancelCode, ScriptCode) CANCELLED (1) cancelled while waiting or
-- retrying, CANCELLED_RUNNING (2) cancelled with an attempt in flight,
-- NOT_FOUND (-3) no such job, FINISHED (-4) already completed/failed/cancelled.
local job, due, cancelled, outbox, counts, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, now, actor, dl_prefix = ARGV[1], ARGV[2], ARGV[3] or '', ARGV[4]

local function cancelled_event(attempts, running)
  if actor == '' then
    emit(outbox, 'e', EV_CANCELLED, 'id', id, 'ts', now, 'a', attempts, 'running', running)
  else
    emit(outbox, 'e', EV_CANCELLED, 'id', id, 'ts', now, 'a', attempts, 'running', running, 'actor', actor)
  end
end

local f = redis.call('HMGET', job, 'state', 'topic', 'attempts', 'dl', 'prio', 'fl', 'w', 'hc')
local state, attempts = f[1], f[3] or 0  -- no attempts field: never claimed
if not state then return -3 end
local waiting = state == WAITING
if f[6] == '1' and (state == 'scheduled' or state == 'retrying' or state == 'running' or waiting) then
  flow_leave(ns_of(job), id, flow_fields(job), state, false, now)
end
-- jobs waiting for this one (after=, _deps.lua) take it as failed: each its on_parent_failure
if f[8] == '1' and (state == 'scheduled' or state == 'retrying' or state == 'running' or waiting) then
  deps_parent_ended(ns_of(job), id, false, '', now, outbox, counts)
end
if waiting then
  redis.call('ZREM', ns_of(job) .. K_WAITING_PARENTS, id)
end
if state == 'scheduled' or state == 'retrying' or waiting then
  redis.call('ZREM', wait_set(f[4], f[5], f[2], due, dl_prefix), id)
  redis.call('ZREM', ns_of(job) .. K_PARKED .. f[2], id)  -- parked by a limit
  redis.call('HSET', job, 'state', 'cancelled', 'finished', now)
  redis.call('ZADD', cancelled, now, id)
  move_count(counts, f[2], state, 'cancelled')
  cancelled_event(attempts, 0)
  notify_done(f[7], done, id)
  return 1
elseif state == 'running' then
  redis.call('HSET', job, 'state', 'cancelled')
  move_count(counts, f[2], state, 'cancelled')
  cancelled_event(attempts, 1)
  notify_done(f[7], done, id)
  return 2
end
return -4
