-- prune_dead_letters: retention of one dead-letter topic: delete its dead
-- letters older than the age, then the oldest beyond the cap (bounded batch).
-- Each is recorded `deleted` (actor "retention"), so its audit row ends. A topic
-- left without dead letters leaves the set of dead-letter topics (fail.lua adds it
-- again with its next one), so that set does not grow with every topic ever used.
--
-- KEYS[1] dead-letter set  KEYS[2] counts hash  KEYS[3] outbox
-- KEYS[4] done channel (Scheduler.wait callers learn a dead letter is gone: notify_done)
-- KEYS[5] set of dead-letter topics
-- ARGV[1] now_ms  ARGV[2] job key prefix  ARGV[3] max age ms  ARGV[4] max kept
-- ARGV[5] max dead letters deleted per call  ARGV[6] the dead-letter topic
--
-- Returns the number deleted (call again while it returns the limit).
local set, counts, outbox = KEYS[1], KEYS[2], KEYS[3]
local now, prefix = tonumber(ARGV[1]), ARGV[2]
local age, cap, limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local old = redis.call('ZRANGEBYSCORE', set, '-inf', now - age, 'LIMIT', 0, limit)
local over = redis.call('ZCARD', set) - #old - cap
if over > 0 and #old < limit then
  local more = redis.call('ZRANGE', set, #old, #old + math.min(over, limit - #old) - 1)
  for _, id in ipairs(more) do old[#old + 1] = id end
end
for _, id in ipairs(old) do
  local key = prefix .. id
  local f = redis.call('HMGET', key, 'state', 'topic', 'attempts', 'w')
  if f[1] then
    move_count(counts, f[2], f[1], nil)
    emit(outbox, 'e', EV_DELETED, 'id', id, 'ts', ARGV[1], 'a', f[3] or '0', 'from', f[1], 'actor', 'retention')
    notify_done(f[4], KEYS[4], id)
  end
  delete_job(key)
  redis.call('ZREM', set, id)
end
if redis.call('EXISTS', set) == 0 then
  redis.call('SREM', KEYS[5], ARGV[6])
end
return #old
