-- request_drain: an operator asks one live worker to drain and exit; the worker sees the
-- request at its next heartbeat (advertise_worker.lua keeps the mark and returns it),
-- stops claiming, lets its attempts finish within its grace, releases the rest and leaves
-- the registry. The mark is the field drain_ms added to the worker's registry entry, so it
-- lives and dies with that entry (a worker that dies takes it along).
--
-- KEYS[1] workers hash (layout: advertise_worker.lua)
-- ARGV[1] now_ms  ARGV[2] worker id
--
-- Returns NO_WORKER (0): no live worker has that id (nothing written); REQUESTED (1): the
-- request is written; ALREADY (2): it was requested before, or the worker is stopping
-- already (nothing written).
local workers = KEYS[1]
local now = tonumber(ARGV[1])
local raw = redis.call('HGET', workers, ARGV[2])
if not raw then return 0 end
local ok, e = pcall(cjson.decode, raw)
if not ok or type(e) ~= 'table' or (tonumber(e.heartbeat_ms) or 0) + (tonumber(e.ttl_ms) or 0) <= now then
  return 0
end
if tonumber(e.drain_ms) or e.stopping == true then return 2 end
-- (the entry is compact JSON ending in '}': the mark is appended, every other byte kept)
redis.call('HSET', workers, ARGV[2], string.sub(raw, 1, -2) .. ',"drain_ms":' .. int(now) .. '}')
return 1
