-- Shared helpers, prepended to every script by scripts.py (Redis has no include).
-- scripts.py also prepends `local DEFAULTS = {...}` (scripts.JOB_DEFAULTS): job hash
-- fields that are not stored while they hold that value, and CHUNK_FIELDS. It writes in,
-- as literals wherever they are used (scripts._inline), AUDIT (true|false: with the audit
-- trail off, no outbox event is written at all: no stream to grow, no cost), CLAIM_FIELDS
-- and the names Python declares (scripts.lua_names), never written here as text: K_<NAME>
-- the key names (scheduler/core/keys.py KeyName, e.g. ns .. K_PARKED .. topic), EV_<TYPE>
-- the event types and OUTCOME_<NAME> the outcomes (scheduler/core/outbox.py).
--
-- Job hash {ns}:j:<id>, compact on purpose (memory per delayed job):
--   topic, state, run_at, timeout, created   always
--   due        absent while it equals run_at (until a retry or release moves it)
--   attempts   absent until the first claim (0)
--   meta, tz, max, btype, bdelay, trace, cron   absent while equal to DEFAULTS
--   bmax, bjit  backoff cap ms and jitter mode: absent while equal to DEFAULTS
--   dlq        the job's own dead-letter topic (dead_letter=): absent when not given
--   dl         "1" on a dead letter: it waits in its topic's dead-letter set, not the
--              due set (wait_set), so only a worker listening to that topic runs it
--   fl, key, pol, dd, prio   flow control (_flow.lua): absent when unused
--   worker, token, started, finished, last_error   set as the job runs
--   parents, wp, opf, hc   dependencies (after=, _deps.lua): absent when unused
--   result     the JSON its listeners returned (complete.lua); absent when they
--              returned nothing
--   p1..p8     the payload JSON in chunks (below)
--   pg         the last progress an attempt reported (set_progress.lua):
--              "<attempt> <percent> <message>"; absent until one does
--   lg         "1" once an attempt logged a line: the lines are in the list
--              {ns}:l:<id> (append_log.lua, log_key), the last 100 kept
--   w          "1" once a Scheduler.wait caller registered (watch_job.lua): the
--              scripts that end or remove the job then publish its id on the done
--              channel (notify_done); absent, they publish nothing
--
-- counts hash: field <topic>|<state> holds the number of jobs of that topic
-- currently in Redis in that state (the totals per state are their sums, read
-- by store.stats(): one HINCRBY per move instead of two). A field is removed
-- when it falls to 0 (add_count), so the hash holds only topics with jobs and
-- does not grow with every topic name ever used.

-- Append one audit event (format: scheduler/core/outbox.py) when the audit is on.
local function emit(outbox, ...)
  if AUDIT then
    redis.call('XADD', outbox, '*', ...)
  end
end

-- Numbers handed to redis.call are formatted with sprintf("%.14g"), a large share
-- of a claim's cost: pass strings where one is at hand, and computed integers
-- through int() (integer formatting is much cheaper).
local function int(n)
  return string.format('%d', n)
end

-- A script that leases or settles many jobs (claim.lua, complete.lua) batches its writes
-- (begin_batch): count moves summed per field, sorted-set removals and additions gathered
-- per key, each written once by flush_batch: two HINCRBY, a ZREM and a ZADD per job become
-- a few calls per batch. nil in every other script: the helpers write at once. A batching
-- script reads a count through count_now and flushes before it reads a sorted set it
-- removed jobs from.
local batch = nil
local function begin_batch()
  batch = { counts = {}, zrem = {}, zadd = {} }
end

local function gathered(t, key)
  local list = t[key]
  if not list then list = {}; t[key] = list end
  return list
end

-- ZREM / ZADD of one job, now or with the batch.
local function zrem_job(set, id)
  if batch then
    local list = gathered(batch.zrem, set)
    list[#list + 1] = id
  else
    redis.call('ZREM', set, id)
  end
end

local function zadd_job(set, score, id)
  if batch then
    local list = gathered(batch.zadd, set)
    list[#list + 1] = score
    list[#list + 1] = id
  else
    redis.call('ZADD', set, score, id)
  end
end

-- Add `by` ('1' or '-1') to a counts field, removing the field when it reaches 0:
-- the one way every script changes the counts hash.
local function add_count(counts, field, by)
  if batch then
    local deltas = gathered(batch.counts, counts)
    deltas[field] = (deltas[field] or 0) + tonumber(by)
  elseif redis.call('HINCRBY', counts, field, by) == 0 then
    redis.call('HDEL', counts, field)
  end
end

-- A counts field as it stands, the batch's pending moves included.
local function count_now(counts, field)
  local n = tonumber(redis.call('HGET', counts, field) or '0')
  local deltas = batch and batch.counts[counts]
  if deltas and deltas[field] then n = n + deltas[field] end
  return n
end

-- Write what the batch gathered (ZREMs first: no batching script removes a member it added)
-- and keep batching; `done`: stop batching.
local function flush_batch(done)
  if not batch then return end
  local b = batch
  batch = nil
  for set, ids in pairs(b.zrem) do
    for i = 1, #ids, 1000 do redis.call('ZREM', set, unpack(ids, i, math.min(i + 999, #ids))) end
  end
  for set, entries in pairs(b.zadd) do
    for i = 1, #entries, 2000 do redis.call('ZADD', set, unpack(entries, i, math.min(i + 1999, #entries))) end
  end
  for counts, deltas in pairs(b.counts) do
    for field, by in pairs(deltas) do
      if by ~= 0 then add_count(counts, field, int(by)) end
    end
  end
  if not done then begin_batch() end
end

local function move_count(counts, topic, from, to)
  if from and from ~= '' then
    add_count(counts, topic .. '|' .. from, '-1')
  end
  if to and to ~= '' then
    add_count(counts, topic .. '|' .. to, '1')
  end
end

-- Publish on the wake channel when `id` is now the earliest due job, so
-- sleeping workers re-plan; a later job changes nothing and costs no message.
local function wake_if_first(due, wake, id, due_ms)
  local first = redis.call('ZRANGE', due, '0', '0')
  if first[1] == id then
    redis.call('PUBLISH', wake, due_ms)
  end
end

-- A job's payload JSON lives inside its hash, as chunk fields p1..pN of at
-- most CHUNK bytes, joined back on read: Redis keeps a small hash whose
-- fields and values are all <= hash-max-listpack-value (64 by default) in one
-- compact listpack, and a single longer value would turn the whole hash into
-- a hashtable, costing far more memory per job. One key per job instead of a
-- hash plus a payload string saves a key's overhead per delayed job.
-- A payload over INLINE_CHUNKS chunks (512 B), where chunk overhead and
-- listpack scans stop paying off, goes to a string key beside the hash:
-- {ns}:p:<id> for {ns}:j:<id> (the namespace cannot contain '}', so the first
-- '}:j:' is the separator). scheduler/store/reads.py reads both forms the same way.
local CHUNK = 64
local INLINE_CHUNKS = #CHUNK_FIELDS  -- CHUNK_FIELDS (p1..p8) is compiled in by scripts.py

local function payload_key(job_key)
  return (string.gsub(job_key, JOB_MARK, PAYLOAD_MARK, 1))
end

-- Append the payload's hash fields to `fields` (HSET arguments), or store it
-- in its own key when it is too big to inline.
local function add_payload(job_key, payload, fields)
  local n = math.ceil(#payload / CHUNK)
  if n > INLINE_CHUNKS then
    redis.call('SET', payload_key(job_key), payload)
    return
  end
  for i = 1, n do
    fields[#fields + 1] = CHUNK_FIELDS[i]
    fields[#fields + 1] = string.sub(payload, (i - 1) * CHUNK + 1, i * CHUNK)
  end
end

-- The payload of a job from its hash as a table (HGETALL): chunks p1, p2, ... joined,
-- or its own key when it was too big to inline.
local function read_payload(job_key, h)
  local first = h[CHUNK_FIELDS[1]]
  if not first then
    return redis.call('GET', payload_key(job_key)) or 'null'
  end
  if not h[CHUNK_FIELDS[2]] then
    return first  -- one chunk (a payload of at most 64 bytes): nothing to join
  end
  local parts = {}
  for i = 1, INLINE_CHUNKS do
    local part = h[CHUNK_FIELDS[i]]
    if not part then break end
    parts[i] = part
  end
  return table.concat(parts)
end

-- The list of a job's log lines ({ns}:l:<id> for {ns}:j:<id>).
local function log_key(job_key)
  return (string.gsub(job_key, JOB_MARK, LOGS_MARK, 1))
end

-- Delete a finished job: its hash, its payload key, its log list and, after=
-- (_deps.lua), its children set and its parents' results, if any.
local function delete_job(job_key)
  redis.call('DEL', job_key, payload_key(job_key), log_key(job_key),
    (string.gsub(job_key, JOB_MARK, CHILDREN_MARK, 1)), (string.gsub(job_key, JOB_MARK, PARENT_RESULTS_MARK, 1)))
end

-- Tell Scheduler.wait callers that job `id` ended or is gone, only when one registered
-- (`w`, the job's field of that name): a job nobody waits for costs no message.
local function notify_done(w, done, id)
  if w == '1' then
    redis.call('PUBLISH', done, id)
  end
end

-- The outbox fields of a settling attempt's report (attempt `attempt` of the job at
-- `job_key`, its `pg` and `lg` fields): progress json {percent, message} when that
-- attempt reported one, logs json (its lines) when it logged any. Called only when
-- the audit is on and the job has either field, so a job without them pays nothing.
-- The percent goes in as Python wrote it (progress.py): cjson would print the number
-- with 14 digits (33.333333333333336 -> 33.333333333333), and the audit is Redis, exactly.
local function attempt_report(job_key, attempt, pg, lg, into)
  local mine = attempt .. ' '
  if pg and string.sub(pg, 1, #mine) == mine then
    local percent, message = string.match(pg, '^%S+ (%S+) (.*)$')
    local p = '{"percent":' .. percent
    if message ~= '' then p = p .. ',"message":' .. cjson.encode(message) end
    into[#into + 1] = 'progress'
    into[#into + 1] = p .. '}'
  end
  if lg == '1' then
    local lines = {}
    for _, entry in ipairs(redis.call('LRANGE', log_key(job_key), '0', '-1')) do
      if string.sub(entry, 1, #mine) == mine then
        lines[#lines + 1] = string.match(entry, '^%S+ %S+ (.*)$')
      end
    end
    if #lines > 0 then
      into[#into + 1] = 'logs'
      into[#into + 1] = cjson.encode(lines)
    end
  end
  return into
end

-- When a settling attempt ended and how long it ran, as its worker measured them:
-- `end_arg` (the worker's clock when its listeners finished; "" unknown: now) kept
-- within [the claim's `started`, now], the duration from `start_arg` (when they started;
-- "" unknown: the claim's start). A settlement written late (Redis was down) thus keeps
-- the attempt's own times. Returns the end ms (a string) and the duration ms.
local function attempt_times(started, start_arg, end_arg, now, now_s)
  local claimed = tonumber(started or now_s)
  local fin, fin_s = now, now_s
  if end_arg ~= '' then
    fin = math.min(math.max(tonumber(end_arg), claimed), now)
    if fin ~= now then fin_s = int(fin) end
  end
  local from = claimed
  if start_arg ~= '' then from = math.max(tonumber(start_arg), claimed) end
  return fin_s, int(fin - math.min(from, fin))
end

-- A topic's configuration hash (scheduler/facade/topics.py; empty when it has none) as a table,
-- read once per call (enqueue_many's jobs of one topic share it; no script that reads it
-- writes it). The table is shared: read it, never change it.
local topic_configs = {}
local function topic_config(key)
  local cfg = topic_configs[key]
  if cfg then return cfg end
  cfg = {}
  local raw = redis.call('HGETALL', key)
  for i = 1, #raw, 2 do cfg[raw[i]] = raw[i + 1] end
  topic_configs[key] = cfg
  return cfg
end

-- A new job `j` takes its topic's retry policy and timeout where the caller gave none
-- (`retry_given`/`timeout_given` "1": given); true when it took either.
local function topic_defaults(j, cfg, retry_given, timeout_given)
  local defaulted = false
  if retry_given ~= '1' and cfg.max then
    j.max, j.btype, j.bdelay, j.bmax, j.bjit = cfg.max, cfg.btype, cfg.bdelay, cfg.bmax, cfg.bjit
    defaulted = true
  end
  if timeout_given ~= '1' and cfg.timeout then j.timeout, defaulted = cfg.timeout, true end
  return defaulted
end

-- Store a new job hash, make it due and record `scheduled`. `j` holds the
-- job's fields (see enqueue.lua); a DEFAULTS field it leaves nil holds its
-- default (fire_crons.lua passes no bmax/bjit for a schedule stored before them).
-- Returns false when the id exists already.
-- The caller wakes workers (wake_if_first) unless it leases the job itself.
local function create_job(job, due, outbox, counts, now, j)
  if redis.call('EXISTS', job) == 1 then
    return false
  end
  local fields = { 'topic', j.topic, 'state', j.state or 'scheduled', 'run_at', j.run_at,
    'timeout', j.timeout, 'created', now }
  if j.due ~= j.run_at then fields[#fields + 1] = 'due'; fields[#fields + 1] = j.due end
  for name, default in pairs(DEFAULTS) do
    local value = j[name]
    if value ~= nil and value ~= default then fields[#fields + 1] = name; fields[#fields + 1] = value end
  end
  if j.parents then fields[#fields + 1] = 'parents'; fields[#fields + 1] = j.parents end
  if j.froot then fields[#fields + 1] = 'froot'; fields[#fields + 1] = j.froot end
  add_payload(job, j.payload, fields)
  redis.call('HSET', job, unpack(fields))
  redis.call('ZADD', due, j.due, j.id)
  move_count(counts, j.topic, nil, j.state or 'scheduled')
  if j.parents then
    emit(outbox, 'e', EV_SCHEDULED, 'id', j.id, 'ts', now, 'a', '0',
      'topic', j.topic, 'run_at', j.run_at, 'due', j.due, 'tz', j.tz,
      'payload', j.payload, 'metadata', j.meta, 'max_attempts', j.max,
      'backoff_type', j.btype, 'backoff_delay', j.bdelay, 'timeout_ms', j.timeout,
      'trace', j.trace, 'cron', j.cron, 'parents', j.parents)
    return true
  end
  emit(outbox, 'e', EV_SCHEDULED, 'id', j.id, 'ts', now, 'a', '0',
    'topic', j.topic, 'run_at', j.run_at, 'due', j.due, 'tz', j.tz,
    'payload', j.payload, 'metadata', j.meta, 'max_attempts', j.max,
    'backoff_type', j.btype, 'backoff_delay', j.bdelay, 'timeout_ms', j.timeout,
    'trace', j.trace, 'cron', j.cron)
  return true
end

-- Lease a due job to `worker` and start an attempt: attempts + 1, state
-- running with the worker's token, out of the due set and into the active
-- one until `deadline` (the lease), and `attempt_started`. `state` is the
-- job's state before, `job_due` its due ms. Returns the attempt and the token.
-- The token is worker:attempt:n, n from the namespace's lease counter `seq`:
-- worker and attempt alone repeat (an operator's retry and a graceful release
-- take the attempt counter back, a deleted id can be scheduled again), and a
-- repeated token would let an attempt whose lease was lost settle its successor.
-- `attempts`: the job's attempts field as its caller read it ('0' for a job that never ran).
local function lease_job(key, id, topic, state, job_due, worker, now_s, deadline, due, active, outbox, counts,
                         seq, attempts)
  local attempt = tonumber(attempts) + 1
  local attempt_s = int(attempt)
  local token = worker .. ':' .. attempt_s .. ':' .. int(redis.call('INCR', seq))
  zrem_job(due, id)
  redis.call('HSET', key, 'attempts', attempt_s, 'state', 'running', 'worker', worker, 'token', token,
    'started', now_s)
  zadd_job(active, deadline, id)
  move_count(counts, topic, state, 'running')
  emit(outbox, 'e', EV_ATTEMPT_STARTED, 'id', id, 'ts', now_s, 'a', attempt_s,
    'worker', worker, 'due', job_due, 'topic', topic)
  return attempt, token
end
