-- Shared helpers, prepended to every script by scripts.py (Redis has no include).
-- scripts.py also prepends `local AUDIT = true|false`: with the audit trail
-- off, no outbox event is written at all (no stream to grow, no cost).
--
-- counts hash: field <state> and <topic>|<state> hold the number of jobs
-- currently in Redis in that state.

-- Append one audit event (format: scheduler/outbox.py) when the audit is on.
local function emit(outbox, ...)
  if AUDIT then
    redis.call('XADD', outbox, '*', ...)
  end
end

local function move_count(counts, topic, from, to)
  if from and from ~= '' then
    redis.call('HINCRBY', counts, from, -1)
    redis.call('HINCRBY', counts, topic .. '|' .. from, -1)
  end
  if to and to ~= '' then
    redis.call('HINCRBY', counts, to, 1)
    redis.call('HINCRBY', counts, topic .. '|' .. to, 1)
  end
end

-- Publish on the wake channel when `id` is now the earliest due job, so
-- sleeping workers re-plan; a later job changes nothing and costs no message.
local function wake_if_first(due, wake, id, due_ms)
  local first = redis.call('ZRANGE', due, 0, 0)
  if first[1] == id then
    redis.call('PUBLISH', wake, due_ms)
  end
end

-- The payload lives in a string key beside the job hash ({ns}:p:<id> for
-- {ns}:j:<id>): a payload over 64 bytes inside the hash would turn the whole
-- hash from a compact listpack into a hashtable, doubling a job's memory.
-- The namespace cannot contain '}', so the first '}:j:' is the separator.
local function payload_key(job_key)
  return (string.gsub(job_key, '}:j:', '}:p:', 1))
end

-- Delete a finished job: its hash and its payload.
local function delete_job(job_key)
  redis.call('DEL', job_key, payload_key(job_key))
end

-- Store a new job hash, make it due and record `scheduled`. `j` holds the
-- job's fields (see enqueue.lua). Returns false when the id exists already.
local function create_job(job, due, outbox, counts, wake, now, j)
  if redis.call('EXISTS', job) == 1 then
    return false
  end
  redis.call('HSET', job,
    'topic', j.topic, 'meta', j.meta, 'tz', j.tz,
    'run_at', j.run_at, 'due', j.due, 'state', 'scheduled', 'attempts', 0,
    'max', j.max, 'btype', j.btype, 'bdelay', j.bdelay, 'timeout', j.timeout,
    'created', now)
  -- Empty optional fields are not stored (memory per delayed job).
  if j.trace ~= '' then redis.call('HSET', job, 'trace', j.trace) end
  if j.cron ~= '' then redis.call('HSET', job, 'cron', j.cron) end
  redis.call('SET', payload_key(job), j.payload)
  redis.call('ZADD', due, j.due, j.id)
  move_count(counts, j.topic, nil, 'scheduled')
  emit(outbox, 'e', 'scheduled', 'id', j.id, 'ts', now, 'a', 0,
    'topic', j.topic, 'run_at', j.run_at, 'due', j.due, 'tz', j.tz,
    'payload', j.payload, 'metadata', j.meta, 'max_attempts', j.max,
    'backoff_type', j.btype, 'backoff_delay', j.bdelay, 'timeout_ms', j.timeout,
    'trace', j.trace, 'cron', j.cron)
  wake_if_first(due, wake, j.id, j.due)
  return true
end
