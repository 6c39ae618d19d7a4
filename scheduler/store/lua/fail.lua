-- fail: settle failed attempts (batch): retry later, or fail for good. Also
-- used to recover expired leases (a lost worker), with require_expired = 1.
--
-- A job failing for good whose topic has a dead-letter topic (its own `dlq`
-- field, else its topic's configuration hash, field dead_letter) is copied
-- there in the same call: a new job (the given dead-letter id) on the
-- dead-letter topic with the original payload and metadata source_topic,
-- source_job_id, error, error_type, failed_at, attempts; state scheduled,
-- flagged dl, held in that topic's dead-letter set, never in the due set (only
-- a worker with a listener for that topic runs it: claim.lua), and recorded
-- `scheduled`. A dead letter's own retries wait in that set too (wait_set).
--
-- A job failing for good that jobs wait for (`hc`: after=, _deps.lua) applies each
-- child's on_parent_failure (fail, ignore, cancel).
--
-- KEYS[1] active zset  KEYS[2] due zset     KEYS[3] failed zset  KEYS[4] cancelled zset
-- KEYS[5] outbox       KEYS[6] counts hash  KEYS[7] wake channel
-- KEYS[8] set of dead-letter topics (retention prunes each)
-- KEYS[9] done channel (a job failing for good that someone waits for is
--   published there: notify_done)
-- ARGV[1] now_ms  ARGV[2] job key prefix  ARGV[3] topic configuration key prefix
-- ARGV[4] dead-letter set key prefix (the per-topic keys depend on each job, so
--   they are built from these prefixes, as job keys are; all share the {ns} tag)
-- ARGV[5] failed_at: now_ms as ISO 8601 UTC (dead-letter metadata)
-- ARGV[6..] groups of 11: id, token, require_expired ("1": only if the lease
--   deadline has passed), outcome (failed|timed_out|worker_lost),
--   error json, retry_at_ms (-1 = terminal), dead-letter job id, error type,
--   error message truncated to 256 characters (the last three "" unless
--   terminal), start ms, end ms (the worker's clock when the listeners started
--   and finished; "" unknown, as for a lost worker: attempt_times). The retry
--   decision is made in Python (scheduler.core.retry) from the attempt number this
--   token proves, and from the attempt's end: retry_at_ms is end + backoff, kept
--   as given even when already past (a settlement written late, after a Redis
--   outage: the backoff has been waited since the attempt ended).
--
-- `attempt_failed` carries the attempt's progress and log lines, when it reported
-- any (attempt_report).
--
-- Returns one code per job (scripts.SettleCode, ScriptCode): RETRY_SCHEDULED (3),
-- FAILED (4) for good (then `failed` and `schedule.failed` are recorded),
-- CANCELLED (2) the job was cancelled meanwhile and stays cancelled,
-- LEASE_LOST (-1) token mismatch, LEASE_ALIVE (-2) the lease was renewed
-- meanwhile (recovery skipped).
local active, due, failed, cancelled, outbox, counts, wake, dl_topics, done =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local now, prefix, topic_prefix, dl_prefix, failed_at = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now_s = ARGV[1]  -- stored and scored as given (no number formatting per job)
local ns = ns_of(prefix)

-- Copy a job failing for good to its dead-letter topic, if it has one.
local function dead_letter(key, id, topic, own, attempt, dl_id, err_type, err_message)
  local dl_topic = own
  if not dl_topic or dl_topic == '' then
    dl_topic = redis.call('HGET', topic_prefix .. topic, 'dead_letter')
  end
  if not dl_topic or dl_topic == '' or dl_id == '' then return end
  local flat, h = redis.call('HGETALL', key), {}
  for j = 1, #flat, 2 do h[flat[j]] = flat[j + 1] end
  local meta = cjson.encode({ source_topic = topic, source_job_id = id, error = err_message,
    error_type = err_type, failed_at = failed_at, attempts = tonumber(attempt or '0') })
  local j = { id = dl_id, topic = dl_topic, run_at = now_s, due = now_s, timeout = h['timeout'],
    payload = read_payload(key, h), meta = meta }
  for name, default in pairs(DEFAULTS) do
    if j[name] == nil then j[name] = default end
  end
  local set = dl_prefix .. dl_topic
  if create_job(prefix .. dl_id, set, outbox, counts, now_s, j) then
    redis.call('HSET', prefix .. dl_id, 'dl', '1')
    redis.call('SADD', dl_topics, dl_topic)
    wake_if_first(set, wake, dl_id, now_s)
  end
end

local res = {}
for i = 6, #ARGV, 11 do
  local id, token, require_expired, outcome, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local retry_at_s = ARGV[i + 5]
  local retry_at = tonumber(retry_at_s)
  local key = prefix .. id
  local f = redis.call('HMGET', key, 'token', 'state', 'topic', 'attempts', 'worker', 'started', 'dlq', 'dl',
    'prio', 'fl', 'w', 'pg', 'lg', 'hc')
  local fh = f[10] == '1' and flow_fields(key) or nil
  -- stately: a second job of a key cannot enter retry (pg-boss); it fails instead
  if fh and retry_at >= 0 and f[2] ~= 'cancelled' and fh.pol == 'stately'
      and slot_holder(ns, prefix, 'stately', fh.topic, fh.key, 'retrying') then
    retry_at = -1
  end
  local lease = redis.call('ZSCORE', active, id)
  if f[1] ~= token then
    res[#res + 1] = -1
  elseif require_expired == '1' and (not lease or tonumber(lease) > now) then
    res[#res + 1] = -2
  else
    local attempt = f[4]
    redis.call('ZREM', active, id)
    redis.call('HSET', key, 'token', '', 'last_error', err)
    local fin_s, duration = attempt_times(f[6], ARGV[i + 9], ARGV[i + 10], now, now_s)
    if AUDIT and (f[12] or f[13]) then
      emit(outbox, unpack(attempt_report(key, attempt, f[12], f[13], { 'e', EV_ATTEMPT_FAILED, 'id', id,
        'ts', now_s, 'a', attempt, 'worker', f[5], 'outcome', outcome, 'error', err, 'duration_ms', duration,
        'finished', fin_s })))
    else
      emit(outbox, 'e', EV_ATTEMPT_FAILED, 'id', id, 'ts', now_s, 'a', attempt,
        'worker', f[5], 'outcome', outcome, 'error', err, 'duration_ms', duration, 'finished', fin_s)
    end
    if f[2] == 'cancelled' then
      redis.call('HSET', key, 'finished', fin_s)
      redis.call('ZADD', cancelled, now_s, id)
      res[#res + 1] = 2
    elseif retry_at >= 0 then
      redis.call('HSET', key, 'state', 'retrying', 'due', retry_at_s)
      local set = wait_add(f[8], f[9], f[3], due, dl_prefix, retry_at_s, id)
      if fh then move_slot(ns, fh.pol, fh.topic, fh.key, id, 'running', 'retrying') end
      move_count(counts, f[3], f[2], 'retrying')
      emit(outbox, 'e', EV_RETRY_SCHEDULED, 'id', id, 'ts', now_s, 'a', attempt,
        'next_at', retry_at_s)
      wake_if_first(set, wake, id, retry_at_s)
      res[#res + 1] = 3
    else
      if fh then flow_leave(ns, id, fh, 'running', true, now_s) end
      redis.call('HSET', key, 'state', 'failed', 'finished', fin_s)
      redis.call('ZADD', failed, fin_s, id)
      move_count(counts, f[3], f[2], 'failed')
      emit(outbox, 'e', EV_FAILED, 'id', id, 'ts', now_s, 'a', attempt, 'error', err, 'finished', fin_s)
      emit(outbox, 'e', EV_SCHEDULE_FAILED, 'id', id, 'ts', now_s, 'a', attempt)
      dead_letter(key, id, f[3], f[7], attempt, ARGV[i + 6], ARGV[i + 7], ARGV[i + 8])
      notify_done(f[11], done, id)
      if f[14] == '1' then deps_parent_ended(ns, id, false, '', now_s, outbox, counts) end
      res[#res + 1] = 4
    end
  end
end
return res
