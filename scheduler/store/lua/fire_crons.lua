-- fire_crons: turn due cron ticks into ordinary jobs and advance each
-- schedule, atomically. The caller computed the ticks and the new next fire
-- from the `next` it read; if `next` changed meanwhile (another worker fired
-- it, or it was paused, updated or removed) the schedule is left alone, so a
-- tick becomes a job exactly once however many workers race.
--
-- KEYS[1] crons zset  KEYS[2] due zset  KEYS[3] outbox  KEYS[4] counts
-- KEYS[5] wake channel
-- ARGV[1] now_ms  ARGV[2] cron key prefix  ARGV[3] job key prefix
-- ARGV[4..] per schedule: name, expected next ms, new next ms, n, then n triples
--           (tick ms, job id, traceparent of the tick's producer span)
--
-- A tick's job takes the schedule's template (its backoff cap and jitter stored
-- in the job hash only when not the default, as enqueue does) and obeys its
-- topic's configuration as a scheduled job does (_flow.lua): its key is the
-- schedule's `key`, else its name, so under `singleton` two ticks never run at
-- once, and under short/stately/exclusive a tick whose slot is held is not
-- created (`deduplicated` is recorded on the holder). Its priority is the
-- schedule's, else the topic's default. A schedule's dedupe key (throttle) keeps
-- a tick out while another job holds it, as for schedule_at.
--
-- Returns one number per schedule: jobs created, or STALE (-5) when its next
-- fire was no longer the expected one or is not due yet (nothing done).
local crons, due, outbox, counts, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now, cprefix, jprefix = ARGV[1], ARGV[2], ARGV[3]
local ns = ns_of(jprefix)
local res = {}
local i = 4
while i <= #ARGV do
  local name, expected, new_next, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local key = cprefix .. name
  local f = redis.call('HMGET', key, 'next', 'paused', 'topic', 'payload', 'meta', 'tz', 'max', 'btype',
    'bdelay', 'timeout', 'bmax', 'bjit', 'key', 'prio', 'dd', 'ddw')
  -- A reader may have seen the hash after another worker advanced it: a
  -- `next` still in the future is not due, whatever the caller planned.
  if f[1] ~= expected or f[2] == '1' or tonumber(expected) > tonumber(now) then
    res[#res + 1] = -5
  else
    local created = 0
    local last = nil
    local topic = f[3]
    local cfg = redis.call('HMGET', ns .. K_TOPIC .. topic, 'policy', 'prio', 'concurrency', 'rl_max')
    local pol, jkey, prio = cfg[1] or 'standard', f[13] or name, f[14] or cfg[2] or '0'
    local dd, ddw = f[15], f[16] or ''
    local held_dd = dd and ddw == '' and dd or nil
    local flow = pol ~= 'standard' or cfg[3] or cfg[4] or held_dd
    local set = wait_set('', prio, topic, due, '')
    for t = 0, n - 1 do
      local tick, id, trace = ARGV[i + 4 + 3 * t], ARGV[i + 5 + 3 * t], ARGV[i + 6 + 3 * t]
      local job = { id = id, due = tick, run_at = tick, topic = f[3], payload = f[4], meta = f[5], tz = f[6],
        max = f[7], btype = f[8], bdelay = f[9], timeout = f[10], trace = trace, cron = name,
        -- false (a schedule stored before bmax/bjit existed) -> nil: create_job leaves them out (defaults)
        bmax = f[11] or nil, bjit = f[12] or nil }
      local holder, reason = dd and dedupe_holder(ns, topic, dd, ddw), 'throttle'
      if not holder then holder, reason = flow_refusal(ns, pol, topic, jkey), pol end
      if holder then
        record_refusal(ns, outbox, holder, reason, id, now)
      elseif create_job(jprefix .. id, set, outbox, counts, now, job) then
        flow_join(ns, due, jprefix .. id, id, topic, jkey, pol, prio, flow, held_dd)
        if dd then dedupe_hold(ns, topic, dd, ddw, id) end
        created = created + 1
        wake_if_first(set, wake, id, tick)
      end
      last = tick
    end
    redis.call('HSET', key, 'next', new_next)
    if last then redis.call('HSET', key, 'last_run', last) end
    redis.call('ZADD', crons, new_next, name)
    res[#res + 1] = created
  end
  i = i + 4 + 3 * n
end
return res
