-- known_topics: the topics a worker with listeners for them served less than the topic
-- memory ago (advertise_worker.lua), each with whether a live worker serves it now and,
-- when none does, how many of its jobs are due (waiting for a worker: claim.lua leaves them)
-- and the earliest due time among them. Read only.
--
-- KEYS[1] known topics hash (topic -> "<ms>|<worker>|<app>")
-- KEYS[2] served hash (topic -> ms until which a live worker serves it)
-- KEYS[3] due zset (its priority sets: KEYS[3]:p:<p>, levels in KEYS[3]:levels)
-- ARGV[1] now_ms  ARGV[2] topic memory ms  ARGV[3] job key prefix
-- ARGV[4] the most due jobs looked at (the counts are lower bounds past it)
--
-- Returns { scanned, topic, "<ms>|<worker>|<app>", served-until ms or 0, due jobs, earliest
-- due ms or -1, ... } (5 fields per known topic; scanned: the due jobs looked at).
local known, served, due = KEYS[1], KEYS[2], KEYS[3]
local now, memory, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local cap = tonumber(ARGV[4])
local rows, waiting = {}, {}
local entries = redis.call('HGETALL', known)
for i = 1, #entries, 2 do
  local last = tonumber(string.match(entries[i + 1], '^%d+'))
  if last and last + memory > now then
    local till = tonumber(redis.call('HGET', served, entries[i]) or '0')
    if till <= now then till = 0 end
    local row = { entries[i], entries[i + 1], till, 0, -1 }
    rows[#rows + 1] = row
    if till == 0 then waiting[entries[i]] = row end
  end
end
local scanned = 0
if next(waiting) then
  local sets = { due }
  for _, p in ipairs(redis.call('ZRANGE', due .. K_DUE_LEVELS, '0', '-1')) do sets[#sets + 1] = due .. K_DUE_PRIORITY .. p end
  for _, set in ipairs(sets) do
    if scanned >= cap then break end
    local ids = redis.call('ZRANGEBYSCORE', set, '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', '0', string.format('%d', cap - scanned))
    for i = 1, #ids, 2 do
      scanned = scanned + 1
      local row = waiting[redis.call('HGET', prefix .. ids[i], 'topic') or '']
      if row then
        row[4] = row[4] + 1
        local at = tonumber(ids[i + 1])
        if row[5] < 0 or at < row[5] then row[5] = at end
      end
    end
  end
end
local out = { scanned }
for _, row in ipairs(rows) do
  for j = 1, 5 do out[#out + 1] = row[j] end
end
return out
