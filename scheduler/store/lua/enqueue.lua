-- enqueue: store a new job, make it due, record `scheduled`, and either wake
-- workers or, when the caller names its own worker and nothing else is due,
-- lease the job to that worker at once (no wake-up message, no claim call).
-- The topic's configuration (KEYS[7]) supplies defaults (retry, timeout,
-- priority) and flow control (_flow.lua): a dedupe key or the policy's slot
-- for the job's key may refuse the job (nothing stored; `deduplicated` is
-- recorded on the job holding it) or, debounce, move the waiting holder.
--
-- KEYS[1] job hash        KEYS[2] due zset     KEYS[3] outbox stream
-- KEYS[4] counts hash     KEYS[5] wake channel KEYS[6] active zset
-- KEYS[7] topic configuration hash (scheduler/facade/topics.py; may not exist)
-- KEYS[8] the namespace's lease counter (every lease token is unique: lease_job in _lib.lua)
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] due_ms  ARGV[4] topic  ARGV[5] payload json
-- ARGV[6] metadata json  ARGV[7] tz  ARGV[8] run_at_ms  ARGV[9] max_attempts
-- ARGV[10] backoff_type  ARGV[11] backoff_delay_ms  ARGV[12] timeout_ms
-- ARGV[13] traceparent ("" for none)  ARGV[14] cron schedule name ("" for none)
-- ARGV[15] worker id to lease the job to when it is due now and no other job
--          is due ("" for none: always queue)  ARGV[16] lease_ms
-- ARGV[17] backoff_max_delay_ms  ARGV[18] backoff_jitter (none|full|equal)
-- ARGV[19] the job's own dead-letter topic ("" for none: its topic's, if configured)
-- ARGV[20] key ("" for none)  ARGV[21] priority ("" for the topic's default)
-- ARGV[22] dedupe key ("" for none)  ARGV[23] dedupe window ms ("" for none: until
--          the job finishes)  ARGV[24] dedupe mode (throttle|debounce)
-- ARGV[25] "1" when the job's retry policy was given (else the topic's, if any)
-- ARGV[26] "1" when the job's timeout was given (else the topic's, if any)
-- ARGV[27] this partition's number ("" when the namespace is not partitioned)
-- ARGV[28] the parents' ids, a JSON list ("" for none: after=, _deps.lua): the job is
--          created waiting_for_parents, in no due set, unless its parents are done already
-- ARGV[29] on_parent_failure (fail|ignore|cancel)
--
-- Returns (scripts.EnqueueCode, ScriptCode) { QUEUED (1), "", "", waiting } when
-- created and queued, { LEASED (2), attempt, token, waiting } when created and
-- leased to ARGV[15] (waiting: the topic's waiting + retrying jobs when over its
-- warning_size, else 0), { REFUSED (3), holder id, reason } when a dedupe key
-- (reason "throttle") or the policy (reason: its name) keeps the job out,
-- { DEBOUNCED (4), holder id, "debounce" } when the waiting holder took its
-- payload and run_at, { DUPLICATE (-10) } when a job with this id exists (its
-- fields are left untouched: ids are idempotency keys), { KEY_REQUIRED (-11) }
-- when the topic's policy is key_strict_fifo and no key is given, or
-- { WRONG_PARTITION (-13), home } when the topic has a topic-wide limit and so lives
-- on partition `home` only (docs/how-to/scaling-out.md): nothing stored, the caller re-sends,
-- or { UNKNOWN_PARENT (-15), id } when a parent of ARGV[28] does not exist (here: the
-- caller places a child on its parents' partition): nothing stored.
local job = {
  id = ARGV[1], due = ARGV[3], topic = ARGV[4], payload = ARGV[5], meta = ARGV[6],
  tz = ARGV[7], run_at = ARGV[8], max = ARGV[9], btype = ARGV[10], bdelay = ARGV[11],
  timeout = ARGV[12], trace = ARGV[13], cron = ARGV[14], bmax = ARGV[17], bjit = ARGV[18],
  dlq = ARGV[19],
}
local key, due, now, worker = KEYS[1], KEYS[2], ARGV[2], ARGV[15]
local jkey, prio, dd, dd_window, dd_mode = ARGV[20], ARGV[21], ARGV[22], ARGV[23], ARGV[24]
local ns, topic = ns_of(key), job.topic
local cfg = topic_config(KEYS[7])
if cfg.home and ARGV[27] ~= '' and cfg.home ~= ARGV[27] then return { -13, cfg.home } end
local parents = nil
if ARGV[28] and ARGV[28] ~= '' then
  parents = cjson.decode(ARGV[28])
  for _, p in ipairs(parents) do
    if redis.call('EXISTS', ns .. K_JOB .. p) == 0 then return { -15, p } end
  end
end
-- (defaulted: the caller's copy of the job is not what is stored: no handoff)
local defaulted = topic_defaults(job, cfg, ARGV[25], ARGV[26])
if prio == '' then prio = cfg.prio or '0' end
local pol = cfg.policy or 'standard'
if pol == 'key_strict_fifo' and jkey == '' then return { -11 } end
local controlled = dd ~= '' or pol ~= 'standard'  -- a dedupe or the policy may refuse the job
if controlled and redis.call('EXISTS', key) == 1 then return { -10 } end  -- (an id wins over both)

-- A refusal is recorded on the job that holds the slot (an event, never a silent drop).
local function refuse(holder, reason)
  record_refusal(ns, KEYS[3], holder, reason, job.id, now)
  return { 3, holder, reason }
end

if dd ~= '' then
  local holder, state = dedupe_holder(ns, topic, dd, dd_window)
  if holder then
    if dd_mode ~= 'debounce' then return refuse(holder, 'throttle') end
    local hkey = ns .. K_JOB .. holder
    if state == 'scheduled' or state == 'retrying' then
      -- debounce: the waiting holder takes this call's payload and time; its window restarts
      local hprio = redis.call('HGET', hkey, 'prio')
      local fields = { 'run_at', job.run_at }
      for _, name in ipairs(CHUNK_FIELDS) do redis.call('HDEL', hkey, name) end
      redis.call('DEL', payload_key(hkey))
      add_payload(hkey, job.payload, fields)
      redis.call('HSET', hkey, unpack(fields))
      if job.due == job.run_at then redis.call('HDEL', hkey, 'due') else redis.call('HSET', hkey, 'due', job.due) end
      redis.call('ZREM', ns .. K_PARKED .. topic, holder)
      local set = wait_add('', hprio, topic, due, '', job.due, holder)
      redis.call('HINCRBY', hkey, 'dups', '1')
      emit(KEYS[3], 'e', EV_DEBOUNCED, 'id', holder, 'ts', now, 'a', '0', 'run_at', job.run_at, 'due', job.due,
        'payload', job.payload, 'dropped', job.id)
      redis.call('PEXPIRE', flow_key(ns, K_FLOW_DEDUPE, topic, dd), dd_window)
      wake_if_first(set, KEYS[5], holder, job.due)
      return { 4, holder, 'debounce' }
    end
    -- the holder runs: a running job is never replaced, this one is created
  end
end
local holder = flow_refusal(ns, pol, topic, jkey)
if holder then return refuse(holder, pol) end

local set = wait_set('', prio, topic, due, '')
if parents then  -- (not due yet: in the waiting children's set, _deps.lua)
  set, job.state, job.parents = ns .. K_WAITING_PARENTS, WAITING, ARGV[28]
end
if not create_job(key, set, KEYS[3], KEYS[4], now, job) then return { -10 } end
local held_dd = dd ~= '' and dd_window == '' and dd or nil
local flow = pol ~= 'standard' or cfg.concurrency or cfg.rl_max or held_dd
if dd ~= '' then dedupe_hold(ns, topic, dd, dd_window, job.id) end
if flow or jkey ~= '' or prio ~= '0' or held_dd then
  flow_join(ns, due, key, job.id, topic, jkey, pol, prio, flow, held_dd)
end
local waiting = 0
if cfg.warn then
  local c = redis.call('HMGET', KEYS[4], topic .. '|scheduled', topic .. '|retrying')
  local n = tonumber(c[1] or '0') + tonumber(c[2] or '0')
  if n > tonumber(cfg.warn) then waiting = n end
end
if parents then
  deps_link(ns, key, job.id, parents, ARGV[29], now, KEYS[3], KEYS[4])
  return { 1, '', '', waiting }
end
if worker ~= '' and not flow and not defaulted and set == due and tonumber(job.due) <= tonumber(now) then
  -- Only while nothing else is due: a job waiting longer keeps its place.
  local first = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', '0', '2')
  if #first == 1 then
    local attempt, token = lease_job(key, job.id, topic, 'scheduled', job.due, worker, now,
      int(tonumber(now) + tonumber(ARGV[16])), due, KEYS[6], KEYS[3], KEYS[4], KEYS[8], '0')  -- (new: never ran)
    return { 2, attempt, token, waiting }
  end
end
wake_if_first(set, KEYS[5], job.id, job.due)
return { 1, '', '', waiting }
