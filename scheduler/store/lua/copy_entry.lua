-- copy_entry: copy one job or schedule to its partition under a new partition count
-- (scheduler/ops/migration.py), with every structure it belongs to, in one step: the source
-- keeps it until drop_entry.lua removes it there, so a migration killed at any point and
-- run again leaves each entry exactly once and each count right.
--
-- KEYS[1] the entry's hash on the target partition (job or schedule)
-- KEYS[2] the target's counts hash  KEYS[3] the job's payload key  KEYS[4] the job's log list
--         (a schedule passes its hash as KEYS[3] and KEYS[4]: nothing is written there)
-- KEYS[5..] the keys of the ops of ARGV[1], in order (all on the target's hash tag)
-- ARGV[1] the entry as JSON: { fields = [f1, v1, ...] (the source's HGETALL),
--   payload = the big payload string (absent: none), count = counts field to add 1 to
--   (absent: a schedule), logs = [lines, oldest first] (absent: none),
--   ops = [[kind, a, b], ...] one per KEYS[5..]: z ZADD key a(score) b(member),
--   u ZADD key LT a b (the earliest mark wins), s SADD key a, h HSET key a b,
--   x SET key a (PX b when b is not "") }
--
-- Returns (scripts.CopyCode, ScriptCode) COPIED (1), PRESENT (0) when the target holds
-- this very entry already (an earlier run copied it: nothing written), or CONFLICT (-14)
-- when the target holds another entry under the same name (nothing written).
local doc = cjson.decode(ARGV[1])
local fields = doc.fields
local current = redis.call('HGETALL', KEYS[1])
if #current > 0 then
  if #current ~= #fields then return -14 end
  local want = {}
  for i = 1, #fields, 2 do want[fields[i]] = fields[i + 1] end
  for i = 1, #current, 2 do
    if want[current[i]] ~= current[i + 1] then return -14 end
  end
  return 0
end
redis.call('HSET', KEYS[1], unpack(fields))
if doc.payload then redis.call('SET', KEYS[3], doc.payload) end
if doc.logs and #doc.logs > 0 then redis.call('RPUSH', KEYS[4], unpack(doc.logs)) end
if doc.count then add_count(KEYS[2], doc.count, '1') end
local ops = doc.ops or {}
for i = 5, #KEYS do
  local op = ops[i - 4]
  local kind, key, a, b = op[1], KEYS[i], op[2], op[3]
  if kind == 'z' then
    redis.call('ZADD', key, a, b)
  elseif kind == 'u' then
    redis.call('ZADD', key, 'LT', a, b)
  elseif kind == 's' then
    redis.call('SADD', key, a)
  elseif kind == 'h' then
    redis.call('HSET', key, a, b)
  elseif b ~= nil and b ~= '' then
    redis.call('SET', key, a, 'PX', b)
  else
    redis.call('SET', key, a)
  end
end
return 1
