-- forget_topic: an operator forgets topics a worker served (`horae topics forget`), or
-- housekeeping those last served at least the topic memory ago: their jobs no longer wait
-- for a worker (claim.lua completes them as no_listener, unless a worker listens again).
--
-- KEYS[1] known topics hash (topic -> "<ms>|<worker>|<app>": advertise_worker.lua)
-- ARGV[1] now_ms  ARGV[2] topic memory ms: forget every topic last served at or before
--         now_ms - memory ("-1": none by age)
-- ARGV[3..] topics to forget whatever their age
--
-- Returns the number of topics forgotten.
local known = KEYS[1]
local now, memory = tonumber(ARGV[1]), tonumber(ARGV[2])
local gone = 0
for i = 3, #ARGV do gone = gone + redis.call('HDEL', known, ARGV[i]) end
if memory >= 0 then
  local entries = redis.call('HGETALL', known)
  for i = 1, #entries, 2 do
    local last = tonumber(string.match(entries[i + 1], '^%d+')) or 0
    if last + memory <= now then gone = gone + redis.call('HDEL', known, entries[i]) end
  end
end
return gone
