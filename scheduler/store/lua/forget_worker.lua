-- forget_worker: a worker stops gracefully; remove its registry entry and hand its
-- topics' served-until marks back to the other live workers that serve them (a topic
-- no live worker serves any more loses its mark at once: unserved). A worker that starts
-- to drain passes its stopping entry: it stays listed (stopping, serving nothing) while its
-- attempts finish; stopping workers' topics are never counted as served.
--
-- KEYS[1] workers hash  KEYS[2] served hash (layout: advertise_worker.lua)
-- ARGV[1] now_ms  ARGV[2] worker id  ARGV[3] the stopping entry JSON, or '' to remove it
--
-- Returns 1 when the entry was removed (or replaced), 0 when there was none.
local workers, served = KEYS[1], KEYS[2]
local now = tonumber(ARGV[1])
local raw = redis.call('HGET', workers, ARGV[2])
local removed = redis.call('HDEL', workers, ARGV[2])
if removed == 1 and ARGV[3] ~= '' then
  local entry = ARGV[3]
  local fine, old = pcall(cjson.decode, raw)
  if fine and type(old) == 'table' and tonumber(old.drain_ms) then  -- (keeps an operator's request)
    entry = string.sub(entry, 1, -2) .. ',"drain_ms":' .. int(tonumber(old.drain_ms)) .. '}'
  end
  redis.call('HSET', workers, ARGV[2], entry)
end
local ok, gone = false, nil
if raw then ok, gone = pcall(cjson.decode, raw) end
if not ok or type(gone) ~= 'table' or type(gone.topics) ~= 'table' then return removed end
local best = {}
local entries = redis.call('HGETALL', workers)
for i = 1, #entries, 2 do
  local fine, e = pcall(cjson.decode, entries[i + 1])
  if fine and type(e) == 'table' and type(e.topics) == 'table' and e.stopping ~= true then
    local till = (tonumber(e.heartbeat_ms) or 0) + (tonumber(e.ttl_ms) or 0)
    if till > now then
      for _, t in ipairs(e.topics) do
        if not best[t] or best[t] < till then best[t] = till end
      end
    end
  end
end
for _, t in ipairs(gone.topics) do
  if best[t] then redis.call('HSET', served, t, int(best[t])) else redis.call('HDEL', served, t) end
end
return removed
