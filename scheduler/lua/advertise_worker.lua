-- advertise_worker: a worker's heartbeat in the worker registry; it serves its topics
-- until now_ms + ttl_ms. Also drops the entries of workers that stopped beating (dead)
-- and served-until marks that have passed.
--
-- KEYS[1] workers hash (worker id -> entry JSON: host, pid, topics, concurrency,
--         running, heartbeat_ms, ttl_ms, all_topics)
-- KEYS[2] served hash (topic -> ms until which some live worker serves it)
-- ARGV[1] now_ms  ARGV[2] ttl_ms  ARGV[3] worker id  ARGV[4] entry JSON
-- ARGV[5..] topics this worker serves
--
-- Returns the number of dead workers' entries removed.
local workers, served = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
local till = int(now + tonumber(ARGV[2]))
redis.call('HSET', workers, ARGV[3], ARGV[4])
for i = 5, #ARGV do
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
