-- advertise_worker: a worker's heartbeat in the worker registry; it serves its topics
-- until now_ms + ttl_ms, and the topics it has listeners for are known (served at now_ms
-- by it: their jobs wait for a worker once none serves them, until [worker] topic_memory
-- passes; claim.lua). Also drops the entries of workers that stopped beating (dead)
-- and served-until marks that have passed.
--
-- KEYS[1] workers hash (worker id -> entry JSON: host, pid, topics, concurrency,
--         running, heartbeat_ms, ttl_ms, all_topics)
-- KEYS[2] served hash (topic -> ms until which some live worker serves it)
-- KEYS[3] known topics hash (topic -> "<ms>|<worker id>|<app>": last served, by whom)
-- ARGV[1] now_ms  ARGV[2] ttl_ms  ARGV[3] worker id  ARGV[4] entry JSON
-- ARGV[5] K, the number of (topic, app) pairs that follow: the topics this worker has
--         listeners for, each with the module of its listeners
-- ARGV[6..] those K pairs, then the topics this worker serves (from 6 + 2K)
--
-- Returns the number of dead workers' entries removed.
local workers, served, known = KEYS[1], KEYS[2], KEYS[3]
local now = tonumber(ARGV[1])
local till = int(now + tonumber(ARGV[2]))
redis.call('HSET', workers, ARGV[3], ARGV[4])
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
return removed
