-- advertise_worker: a worker's heartbeat in the worker registry; it serves its topics
-- until now_ms + ttl_ms, and the topics it has listeners for are known (served at now_ms
-- by it: their jobs wait for a worker once none serves them, until [worker] topic_memory
-- passes; claim.lua). Also drops the entries of workers that stopped beating (dead)
-- and served-until marks that have passed. An operator's drain request (drain_ms, written
-- by request_drain.lua into the entry) is kept in the new entry and returned, so the worker
-- learns of it at this heartbeat; a stopping worker advertises itself with stopping true and
-- no served topics (it claims no more, but is listed until it exits).
--
-- KEYS[1] workers hash (worker id -> entry JSON: host, pid, topics, concurrency,
--         running, heartbeat_ms, ttl_ms, all_topics[, stopping][, drain_ms])
-- KEYS[2] served hash (topic -> ms until which some live worker serves it)
-- KEYS[3] known topics hash (topic -> "<ms>|<worker id>|<app>": last served, by whom)
-- ARGV[1] now_ms  ARGV[2] ttl_ms  ARGV[3] worker id  ARGV[4] entry JSON
-- ARGV[5] K, the number of (topic, app) pairs that follow: the topics this worker has
--         listeners for, each with the module of its listeners
-- ARGV[6..] those K pairs, then the topics this worker serves (from 6 + 2K)
--
-- Returns {the number of dead workers' entries removed, the ms of this worker's drain
-- request or 0 when none}.
local workers, served, known = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local till = int(now + tonumber(ARGV[2]))
local drain, entry = 0, ARGV[4]
local old = redis.call('HGET', workers, ARGV[3])
if old then
  local fine, e = pcall(cjson.decode, old)
  if fine and type(e) == 'table' and tonumber(e.drain_ms) then
    drain = int(tonumber(e.drain_ms))
    entry = string.sub(entry, 1, -2) .. ',"drain_ms":' .. drain .. '}'
  end
end
redis.call('HSET', workers, ARGV[3], entry)
local first_served = 6 + 2 * tonumber(ARGV[5])
for i = 6, first_served - 1, 2 do
  local cur = tonumber(string.match(redis.call('HGET', known, ARGV[i]) or '', '^%d+'))
  if not cur or cur <= now then  -- (a worker whose clock runs behind never moves it back)
    redis.call('HSET', known, ARGV[i], ARGV[1] .. '|' .. ARGV[3] .. '|' .. ARGV[i + 1])
  end
end
for i = first_served, #ARGV do
  local cur = redis.call('HGET', served, ARGV[i])
  if not cur or tonumber(cur) < tonumber(till) then redis.call('HSET', served, ARGV[i], till) end
end
local removed = 0
local entries = redis.call('HGETALL', workers)
for i = 1, #entries, 2 do
  local ok, e = pcall(cjson.decode, entries[i + 1])
  if not ok or type(e) ~= 'table' or (tonumber(e.heartbeat_ms) or 0) + (tonumber(e.ttl_ms) or 0) <= now then
    redis.call('HDEL', workers, entries[i])
    removed = removed + 1
  end
end
local marks = redis.call('HGETALL', served)
for i = 1, #marks, 2 do
  if tonumber(marks[i + 1]) <= now then redis.call('HDEL', served, marks[i]) end
end
return {removed, drain}
