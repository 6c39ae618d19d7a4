-- replay_dead_letter: schedule a dead letter's payload again on its source
-- topic as a new job (due now) and remove the dead letter, in one call. The
-- new job's `scheduled` carries its metadata (replayed_from, source_job_id);
-- the dead letter's `deleted` names the actor and the new job (replayed_as).
--
-- KEYS[1] dead-letter job hash  KEYS[2] its dead-letter set  KEYS[3] new job hash
-- KEYS[4] due zset  KEYS[5] outbox  KEYS[6] counts hash  KEYS[7] wake channel
-- KEYS[8] done channel (Scheduler.wait callers learn the dead letter is gone: notify_done)
-- ARGV[1] dead-letter id  ARGV[2] now_ms  ARGV[3] actor  ARGV[4] new job id
-- ARGV[5] source topic  ARGV[6] metadata json  ARGV[7] max_attempts
-- ARGV[8] backoff_type  ARGV[9] backoff_delay_ms  ARGV[10] timeout_ms
-- ARGV[11] backoff_max_delay_ms  ARGV[12] backoff_jitter
-- ARGV[13] the source job's id ("" when unknown)  ARGV[14] dead-letter set key prefix
--
-- A dead letter whose source job is still held, failed, and failed or cancelled children
-- (after=, a flow: _deps.lua) when it ended, runs that job again instead of a copy (rerun:
-- as an operator's retry, its children waiting for it again), and is removed all the same.
--
-- Returns (scripts.OperationCode, ScriptCode) REPLAYED (4) done, RETRIED (1) done by running
-- the source job again, NOT_FOUND (-3) no such dead letter in this set, DUPLICATE (-10) the
-- new id exists.
local dl, set, outbox, counts = KEYS[1], KEYS[2], KEYS[5], KEYS[6]
local id, now, actor, new_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not redis.call('ZSCORE', set, id) then return -3 end
local flat, h = redis.call('HGETALL', dl), {}
if #flat == 0 then
  redis.call('ZREM', set, id)
  return -3
end
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local ns, src_id, code = ns_of(dl), ARGV[13], 4
if src_id ~= '' and redis.call('SCARD', ns .. K_CHILDREN .. src_id) > 0 then
  local src = ns .. K_JOB .. src_id
  local f = redis.call('HMGET', src, unpack(RERUN_FIELDS))
  if f[1] == 'failed' and (not f[4] or f[4] == '') then
    rerun(src, src_id, f, KEYS[4], ns .. K_FAILED, ns .. K_CANCELLED, ARGV[14], now, actor, outbox,
      counts, KEYS[7])
    new_id, code = src_id, 1
  end
end
local job = {
  id = new_id, topic = ARGV[5], run_at = now, due = now, payload = read_payload(dl, h), meta = ARGV[6],
  tz = DEFAULTS.tz, max = ARGV[7], btype = ARGV[8], bdelay = ARGV[9], timeout = ARGV[10],
  trace = DEFAULTS.trace, cron = DEFAULTS.cron, bmax = ARGV[11], bjit = ARGV[12],
  dlq = h['topic'],  -- failing again, it comes back to this dead-letter topic
}
if code == 4 then
  if not create_job(KEYS[3], KEYS[4], outbox, counts, now, job) then return -10 end
  wake_if_first(KEYS[4], KEYS[7], new_id, now)
end
redis.call('ZREM', set, id)
move_count(counts, h['topic'], h['state'], nil)
delete_job(dl)
emit(outbox, 'e', EV_DELETED, 'id', id, 'ts', now, 'a', h['attempts'] or '0', 'from', h['state'],
  'actor', actor, 'replayed_as', new_id)
notify_done(h['w'], KEYS[8], id)
return code
