-- prune: delete finished jobs older than their retention age (bounded batch).
--
-- KEYS[1] completed zset  KEYS[2] failed zset  KEYS[3] cancelled zset  KEYS[4] counts
-- ARGV[1] now_ms  ARGV[2] job key prefix  ARGV[3] completed age ms
-- ARGV[4] failed age ms  ARGV[5] cancelled age ms  ARGV[6] max jobs per set
--
-- Returns the number of jobs deleted (call again while it returns the limit).
local counts = KEYS[4]
local now, prefix, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[6])
local sets = {  -- sorted set, state, retention age ms
  { KEYS[1], 'completed', tonumber(ARGV[3]) },
  { KEYS[2], 'failed', tonumber(ARGV[4]) },
  { KEYS[3], 'cancelled', tonumber(ARGV[5]) },
}
local deleted = 0
for _, s in ipairs(sets) do
  local set, state, age = s[1], s[2], s[3]
  local old = redis.call('ZRANGEBYSCORE', set, '-inf', now - age, 'LIMIT', 0, limit)
  for _, id in ipairs(old) do
    local key = prefix .. id
    local topic = redis.call('HGET', key, 'topic')
    if topic then move_count(counts, topic, state, nil) end
    delete_job(key)
    redis.call('ZREM', set, id)
    deleted = deleted + 1
  end
end
return deleted
