-- fail: settle failed attempts (batch): retry later, or fail for good. Also
-- used to recover expired leases (a lost worker), with require_expired = 1.
--
-- KEYS[1] active zset  KEYS[2] due zset     KEYS[3] failed zset  KEYS[4] cancelled zset
-- KEYS[5] outbox       KEYS[6] counts hash  KEYS[7] wake channel
-- ARGV[1] now_ms  ARGV[2] job key prefix
-- ARGV[3..] groups of 6: id, token, require_expired ("1": only if the lease
--   deadline has passed), outcome (failed|timed_out|worker_lost),
--   error json, retry_at_ms (-1 = terminal). The retry decision is made in
--   Python (scheduler.retry) from the attempt number this token proves.
--
-- Returns one code per job (scripts.SettleCode, ScriptCode): RETRY_SCHEDULED (3),
-- FAILED (4) for good (then `failed` and `schedule.failed` are recorded),
-- CANCELLED (2) the job was cancelled meanwhile and stays cancelled,
-- LEASE_LOST (-1) token mismatch, LEASE_ALIVE (-2) the lease was renewed
-- meanwhile (recovery skipped).
local active, due, failed, cancelled, outbox, counts, wake =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local now, prefix = tonumber(ARGV[1]), ARGV[2]
local now_s = ARGV[1]  -- stored and scored as given (no number formatting per job)
local res = {}
for i = 3, #ARGV, 6 do
  local id, token, require_expired, outcome, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local retry_at_s = ARGV[i + 5]
  local retry_at = tonumber(retry_at_s)
  local key = prefix .. id
  local f = redis.call('HMGET', key, 'token', 'state', 'topic', 'attempts', 'worker', 'started')
  local lease = redis.call('ZSCORE', active, id)
  if f[1] ~= token then
    res[#res + 1] = -1
  elseif require_expired == '1' and (not lease or tonumber(lease) > now) then
    res[#res + 1] = -2
  else
    local attempt = f[4]
    redis.call('ZREM', active, id)
    redis.call('HSET', key, 'token', '', 'last_error', err)
    emit(outbox, 'e', 'attempt_failed', 'id', id, 'ts', now_s, 'a', attempt,
      'worker', f[5], 'outcome', outcome, 'error', err, 'duration_ms', int(now - tonumber(f[6] or now)))
    if f[2] == 'cancelled' then
      redis.call('HSET', key, 'finished', now_s)
      redis.call('ZADD', cancelled, now_s, id)
      res[#res + 1] = 2
    elseif retry_at >= 0 then
      redis.call('HSET', key, 'state', 'retrying', 'due', retry_at_s)
      redis.call('ZADD', due, retry_at_s, id)
      move_count(counts, f[3], f[2], 'retrying')
      emit(outbox, 'e', 'retry_scheduled', 'id', id, 'ts', now_s, 'a', attempt,
        'next_at', retry_at_s)
      wake_if_first(due, wake, id, retry_at_s)
      res[#res + 1] = 3
    else
      redis.call('HSET', key, 'state', 'failed', 'finished', now_s)
      redis.call('ZADD', failed, now_s, id)
      move_count(counts, f[3], f[2], 'failed')
      emit(outbox, 'e', 'failed', 'id', id, 'ts', now_s, 'a', attempt, 'error', err)
      emit(outbox, 'e', 'schedule.failed', 'id', id, 'ts', now_s, 'a', attempt)
      res[#res + 1] = 4
    end
  end
end
return res
