-- claim: take up to N due jobs, lease them to one worker, start an attempt each.
--
-- KEYS[1] due zset   KEYS[2] active zset (score = lease deadline)
-- KEYS[3] outbox     KEYS[4] counts hash  KEYS[5] crons zset (active schedules)
-- ARGV[1] now_ms  ARGV[2] limit  ARGV[3] lease_ms  ARGV[4] worker id
-- ARGV[5] job key prefix (job ids are discovered here, so keys are built from it;
--         all share the namespace hash tag)
-- ARGV[6..] topics this worker serves (none = every topic)
--
-- Returns { next_due_ms or -1, next_cron_ms or -1, fields of job 1 ..., fields of job 2 ... } with
-- 14 fields per job (FIELDS in scripts.py): id, attempt, token, topic, payload, meta, run_at, due,
-- max, btype, bdelay, timeout, trace, cron (fields the hash leaves out filled back in).
-- next_due_ms is the earliest due job left (of the served topics when a topic
-- filter is given, within the scanned window) and next_cron_ms the earliest
-- cron tick, so the worker knows when to wake without polling.
local due, active, outbox, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local worker, prefix = ARGV[4], ARGV[5]
local serve = nil
if #ARGV > 5 then
  serve = {}
  for i = 6, #ARGV do serve[ARGV[i]] = true end
end

local out = { -1, -1 }
local taken = 0
local window = limit
if serve then window = 1000 end
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, window)
for _, id in ipairs(ids) do
  if taken >= limit then break end
  local key = prefix .. id
  local f = redis.call('HMGET', key, 'topic', 'meta', 'run_at', 'due', 'max',
    'btype', 'bdelay', 'timeout', 'trace', 'cron', 'state', unpack(CHUNK_FIELDS))
  if not f[1] then
    redis.call('ZREM', due, id)  -- a due entry without its hash: drop the orphan
  elseif serve == nil or serve[f[1]] then
    local attempt = redis.call('HINCRBY', key, 'attempts', 1)
    local token = worker .. ':' .. attempt
    redis.call('ZREM', due, id)
    redis.call('HSET', key, 'state', 'running', 'worker', worker, 'token', token, 'started', now)
    redis.call('ZADD', active, now + lease, id)
    move_count(counts, f[1], f[11], 'running')
    emit(outbox, 'e', 'attempt_started', 'id', id, 'ts', now, 'a', attempt,
      'worker', worker, 'due', f[4] or f[3], 'topic', f[1])
    local payload = read_payload(key, f, 12)
    local row = { id, attempt, token, f[1], payload, f[2] or DEFAULTS.meta, f[3], f[4] or f[3],
      f[5] or DEFAULTS.max, f[6] or DEFAULTS.btype, f[7] or DEFAULTS.bdelay, f[8], f[9] or DEFAULTS.trace,
      f[10] or DEFAULTS.cron }
    for _, v in ipairs(row) do out[#out + 1] = v end
    taken = taken + 1
  end
end

if serve == nil then
  local nxt = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  if nxt[2] then out[1] = tonumber(nxt[2]) end
else
  local scan = redis.call('ZRANGE', due, 0, window - 1, 'WITHSCORES')
  for i = 1, #scan, 2 do
    local topic = redis.call('HGET', prefix .. scan[i], 'topic')
    if topic and serve[topic] then out[1] = tonumber(scan[i + 1]); break end
  end
end
local cron = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
if cron[2] then out[2] = tonumber(cron[2]) end
return out
