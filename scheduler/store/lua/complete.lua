-- complete: settle successful attempts (batch), and attempts whose payload the
-- topic's schema refused (invalid_payload: the job completes, never retried). A
-- job cancelled while its attempt ran records the attempt but stays cancelled
-- (cancelled wins).
--
-- KEYS[1] active zset  KEYS[2] completed zset  KEYS[3] cancelled zset
-- KEYS[4] outbox       KEYS[5] counts hash     KEYS[6] done channel (a completed
--   job someone waits for is published there: notify_done)
-- ARGV[1] now_ms  ARGV[2] job key prefix  ARGV[3] keep newest N completed
-- ARGV[4..] groups of 6: id, token, outcome (succeeded|no_listener|invalid_payload),
--   detail json ("" for none): for succeeded, the listeners' result (kept in the
--   job's `result` field and carried by the event as `result`; a job whose
--   listeners return nothing pays no byte for it); for invalid_payload, the
--   refusal, kept in the job's last_error with its outcome, so only such jobs pay
--   for the two fields (a no_listener completion keeps its outcome too),
--   start ms, end ms (the worker's clock when the listeners started and finished;
--   "" unknown): the job's `finished` and the event's finished and duration_ms
--   (attempt_times), right even when the settlement is written late
--
-- A completed job some jobs wait for (`hc`: after=, _deps.lua) gives them its result; a
-- child whose last parent this was becomes due.
--
-- The settlement event carries the attempt's progress and log lines, when it
-- reported any (attempt_report).
--
-- Returns one code per job (scripts.SettleCode, ScriptCode): COMPLETED (1),
-- CANCELLED (2) the job was cancelled meanwhile and stays cancelled,
-- LEASE_LOST (-1) when the token no longer holds the lease (another worker
-- recovered the job; this late result is ignored).
local active, completed, cancelled, outbox, counts, done = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now, prefix, keep = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local now_s = ARGV[1]  -- stored and scored as given (no number formatting per job)
local res = {}
begin_batch()  -- the sorted sets and counts of the whole batch written once (_lib.lua)
for i = 4, #ARGV, 6 do
  local id, token, outcome, detail = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local err, result = detail, ''
  if outcome == OUTCOME_SUCCEEDED then err, result = '', detail end
  local key = prefix .. id
  local f = redis.call('HMGET', key, 'token', 'state', 'topic', 'attempts', 'worker', 'started', 'fl', 'w', 'pg',
    'lg', 'hc')
  if f[1] ~= token then
    res[#res + 1] = -1
  else
    zrem_job(active, id)
    local fin_s, duration = attempt_times(f[6], ARGV[i + 4], ARGV[i + 5], now, now_s)
    -- one HSET: the token given back, when it finished, why (no_listener: `jobs show` says why
    -- the job completed without a run; invalid_payload: the refusal), its result, its state
    local set = { 'token', '', 'finished', fin_s }
    if result ~= '' then set[5], set[6] = 'result', result end
    if outcome ~= OUTCOME_SUCCEEDED then
      set[#set + 1], set[#set + 2] = 'outcome', outcome
      if err ~= '' then set[#set + 1], set[#set + 2] = 'last_error', err end
    end
    local kind = EV_COMPLETED
    if f[2] == 'cancelled' then
      redis.call('HSET', key, unpack(set))
      zadd_job(cancelled, now_s, id)
      kind = EV_ATTEMPT_SUCCEEDED
      res[#res + 1] = 2
    else
      if f[7] == '1' then flow_leave(ns_of(prefix), id, flow_fields(key), 'running', false, now_s) end
      set[#set + 1], set[#set + 2] = 'state', 'completed'
      redis.call('HSET', key, unpack(set))
      zadd_job(completed, fin_s, id)
      move_count(counts, f[3], f[2], 'completed')
      notify_done(f[8], done, id)  -- (a cancelled job was published when it was cancelled)
      -- children waiting for it (after=, _deps.lua) take its result; maybe they are due now
      if f[11] == '1' then deps_parent_ended(ns_of(prefix), id, true, result, now_s, outbox, counts) end
      res[#res + 1] = 1
    end
    if detail == '' and not (AUDIT and (f[9] or f[10])) then
      emit(outbox, 'e', kind, 'id', id, 'ts', now_s, 'a', f[4],
        'worker', f[5], 'outcome', outcome, 'duration_ms', duration, 'finished', fin_s)
    else
      local ev = { 'e', kind, 'id', id, 'ts', now_s, 'a', f[4],
        'worker', f[5], 'outcome', outcome, 'duration_ms', duration, 'finished', fin_s }
      if err ~= '' then ev[#ev + 1] = 'error'; ev[#ev + 1] = err end
      if result ~= '' then ev[#ev + 1] = 'result'; ev[#ev + 1] = result end
      if AUDIT and (f[9] or f[10]) then attempt_report(key, f[4], f[9], f[10], ev) end
      emit(outbox, unpack(ev))
    end
  end
end
flush_batch(true)
-- Keep only the newest `keep` completed jobs (age is pruned by prune.lua).
local extra = redis.call('ZCARD', completed) - keep
if extra > 0 then
  local old = redis.call('ZPOPMIN', completed, int(math.min(extra, 1000)))
  for j = 1, #old, 2 do
    local key = prefix .. old[j]
    local topic = redis.call('HGET', key, 'topic')
    if topic then move_count(counts, topic, 'completed', nil) end
    delete_job(key)
  end
end
return res
