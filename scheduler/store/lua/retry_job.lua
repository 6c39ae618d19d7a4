-- retry_job: run a failed or cancelled job again (an operator's retry). The
-- job gets a fresh run: its attempt counter starts again from 0 (so the full
-- max_attempts budget applies), it is due now, and `retried` records the
-- attempts of the run that ended (the audit numbers attempts on from there).
-- last_error is kept until a new attempt replaces it. The jobs scheduled after= it (or its
-- parents in a flow) that its failure or cancel failed or cancelled wait for it again
-- (deps_rearm), each with its own `retried`.
--
-- KEYS[1] job hash  KEYS[2] due zset  KEYS[3] failed zset  KEYS[4] cancelled zset
-- KEYS[5] outbox    KEYS[6] counts hash  KEYS[7] wake channel
-- ARGV[1] id  ARGV[2] now_ms  ARGV[3] actor  ARGV[4] dead-letter set key prefix (a
--   dead letter waits in its set again: wait_set)
--
-- Returns (scripts.OperationCode, ScriptCode) RETRIED (1) due again now,
-- NOT_FOUND (-3) no such job, RUNNING (-6) cancelled while an attempt is still
-- in flight (retry once it has finished), WRONG_STATE (-7) not failed or cancelled.
local job, due, failed, cancelled, outbox, counts, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id, now, actor, dl_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local f = redis.call('HMGET', job, unpack(RERUN_FIELDS))
local state = f[1]
if not state then return -3 end
if state ~= 'failed' and state ~= 'cancelled' then return -7 end
if f[4] and f[4] ~= '' then return -6 end
rerun(job, id, f, due, failed, cancelled, dl_prefix, now, actor, outbox, counts, wake)
return 1
