-- drop_entry: remove one job or schedule from the partition it leaves in a partition
-- migration (scheduler/ops/migration.py), once copy_entry.lua put it on its new partition:
-- its hash, payload and log keys, its memberships, the flow-control marks it holds and
-- its count, in one step.
--
-- KEYS[1] the entry's hash on the source partition (job or schedule)
-- KEYS[2] the source's counts hash  KEYS[3] the job's payload key  KEYS[4] the job's log list
--         (a schedule passes its hash as KEYS[3] and KEYS[4])
-- KEYS[5..] the keys of the ops of ARGV[1], in order (all on the source's hash tag)
-- ARGV[1] JSON: { count = counts field to take 1 from (absent: a schedule),
--   ops = [[kind, a, b], ...] one per KEYS[5..]: z ZREM key b (a member), s SREM key a,
--   h HDEL key a when its value is b, x DEL key when its value is a (a mark this entry
--   still holds) }
--
-- Returns (scripts.DropCode) DROPPED (1), or ABSENT (0) when the source no longer holds
-- the entry (an earlier run dropped it: nothing written).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local doc = cjson.decode(ARGV[1])
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
if doc.count then add_count(KEYS[2], doc.count, '-1') end
local ops = doc.ops or {}
for i = 5, #KEYS do
  local op = ops[i - 4]
  local kind, key, a, b = op[1], KEYS[i], op[2], op[3]
  if kind == 'z' then
    redis.call('ZREM', key, b)
  elseif kind == 's' then
    redis.call('SREM', key, a)
  elseif kind == 'h' then
    if redis.call('HGET', key, a) == b then redis.call('HDEL', key, a) end
  elseif kind == 'x' then
    if redis.call('GET', key) == a then redis.call('DEL', key) end
  end
end
return 1
