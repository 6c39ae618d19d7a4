-- claim: take up to N due jobs, lease them to one worker, start an attempt each.
--
-- KEYS[1] due zset   KEYS[2] active zset (score = lease deadline)
-- KEYS[3] outbox     KEYS[4] counts hash  KEYS[5] crons zset (active schedules)
-- KEYS[6] served hash (topic -> ms until which a live worker serves it: advertise_worker.lua)
-- KEYS[7] set of dead-letter topics (fail.lua)
-- KEYS[8] the namespace's lease counter (every lease token is unique: lease_job in _lib.lua)
-- KEYS[9] known topics hash (topic -> "<ms>|<worker>|<app>": when a worker with listeners
--         for it last served it; advertise_worker.lua)
-- ARGV[1] now_ms  ARGV[2] limit  ARGV[3] lease_ms  ARGV[4] worker id
-- ARGV[5] job key prefix (job ids are discovered here, so keys are built from it;
--         all share the namespace hash tag)
-- ARGV[6] "1": also take jobs of topics no live worker serves (their served-until
--         mark is missing or past) and no worker served within the topic memory (the
--         no-listener completion applies); "0": only the topics given
-- ARGV[7] dead-letter set key prefix
-- ARGV[8] topic memory ms: a topic served (KEYS[9]) less than this long ago is known, and
--         a worker without listeners for it never takes its jobs (whatever its filter:
--         they wait for a worker of the topic; `horae topics forget` ends the wait)
-- ARGV[9] L, the number of topics that follow which this worker has listeners for: it
--         always takes their jobs, and also the dead letters waiting on those of them
--         that are dead-letter topics (after due jobs)
-- ARGV[10..9+L] those topics
-- ARGV[10+L..] topics this worker serves (none, with ARGV[6] "0" = every topic but the
--         known ones it has no listeners for; no filter, no extra reads while no topic is known)
--
-- Returns { next_due_ms or -1, next_cron_ms or -1, fields of job 1 ..., fields of job 2 ... } with
-- CLAIM_FIELDS (compiled in from scripts.py) fields per job: id, attempt, token, topic, payload,
-- meta, run_at, due, max, btype, bdelay, timeout, trace, cron, bmax, bjit (fields the hash
-- leaves out filled back in), parent results (a job scheduled after= parents: the JSON
-- object parent id -> result, _deps.lua deps_results; "" for any other job), flow root (a
-- node of a flow, create_flow.lua: its root's id; "" for any other job).
-- next_due_ms is the earliest due job left (of the topics it may take when a topic
-- filter is given, within the scanned window; with ARGV[6] "1" no later than the
-- earliest served-until mark that kept a due job from it, when that job may become
-- its own, nor than the end of a known topic's memory that did; now_ms when a filtered
-- batch came back full) and next_cron_ms the earliest cron tick, so the worker knows
-- when to wake without polling.
local due, active, outbox, counts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now_s, deadline = ARGV[1], int(now + lease)  -- formatted once, not per job (see int in _lib.lua)
local worker, prefix, dl_prefix = ARGV[4], ARGV[5], ARGV[7]
local known_key, memory = KEYS[9], tonumber(ARGV[8])
local listened, own = {}, {}
for i = 10, 9 + tonumber(ARGV[9]) do
  listened[#listened + 1] = ARGV[i]
  own[ARGV[i]] = true
end
local first_topic = 10 + #listened
local adopt = ARGV[6] == '1'
local given = #ARGV >= first_topic
local serve = nil
if given or adopt or redis.call('EXISTS', known_key) == 1 then
  serve = {}
  for i = first_topic, #ARGV do serve[ARGV[i]] = true end
end
local served = KEYS[6]
local recheck = nil  -- earliest served-until mark or memory end (> now) that kept a due job from this worker
local function later(till)
  if not recheck or till < recheck then recheck = till end
end
-- Is `topic` known (a worker with listeners served it less than `memory` ms ago)? Noted for recheck.
local function known(topic)
  local last = tonumber(string.match(redis.call('HGET', known_key, topic) or '', '^%d+'))
  if last and last + memory > now then
    later(last + memory)
    return true
  end
  return false
end
-- May this worker take a job of `topic`? Those it has listeners for; its given topics; every
-- topic when none is given and not adopting; adopting, a topic whose served-until mark is
-- missing or past; but of the topics it has no listeners for, never a known one. Decided
-- once per topic per call.
local decided = {}
local function may_take(topic)
  local yes = decided[topic]
  if yes == nil then
    if own[topic] or serve[topic] then
      yes = true
    elseif adopt then
      local till = tonumber(redis.call('HGET', served, topic) or '0')
      yes = till <= now
      if not yes then later(till) end
    else
      yes = not given
    end
    if yes and not own[topic] and known(topic) then yes = false end
    decided[topic] = yes
  end
  return yes
end

local out = { -1, -1 }
local n = 2  -- #out, kept by hand (the fields of each job are written in place)
local taken = 0
-- Lease job `id` (hash fields h) of `topic` out of the sorted set `from` and write its
-- fields to out.
local function take(key, id, h, topic, from)
  local job_due = h.due or h.run_at
  local attempt, token = lease_job(key, id, topic, h.state, job_due, worker, now_s, deadline, from, active,
    outbox, counts, KEYS[8], h.attempts or '0')
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, attempt, token, topic, read_payload(key, h)
  out[n + 6], out[n + 7], out[n + 8], out[n + 9] = h.meta or DEFAULTS.meta, h.run_at, job_due, h.max or DEFAULTS.max
  out[n + 10], out[n + 11], out[n + 12] = h.btype or DEFAULTS.btype, h.bdelay or DEFAULTS.bdelay, h.timeout
  out[n + 13], out[n + 14] = h.trace or DEFAULTS.trace, h.cron or DEFAULTS.cron
  out[n + 15], out[n + 16] = h.bmax or DEFAULTS.bmax, h.bjit or DEFAULTS.bjit
  out[n + 17] = ''
  if h.parents then out[n + 17] = deps_results(ns_of(key), id) end
  out[n + 18] = h.froot or ''
  n = n + CLAIM_FIELDS
  taken = taken + 1
end
-- HGETALL and a table, not HMGET of every possible field: most are absent (left
-- out while default), and each absent one is a full scan of the listpack.
local function fields(key)
  local raw = redis.call('HGETALL', key)
  local h = {}
  for i = 1, #raw, 2 do h[raw[i]] = raw[i + 1] end
  return h
end
-- Flow control (_flow.lua), read only when some topic is configured: a topic's
-- concurrency and rate limit, a job's key policy. A due job they hold is parked in
-- {ns}:pk:<topic> (out of the due sets, so it neither blocks the sets' heads nor
-- is scanned again) until {ns}:unpark says when to look at the topic again: the
-- rate limit's next slot, or RECHECK_MS (a job of the topic finishing makes it now).
-- Parked jobs come back `limit` at a time, earliest due first, so a key_strict_fifo job
-- behind its key's head is not parked but dropped (held returns true): parked, such
-- jobs could fill every batch and keep a later-due head parked for good.
local ns = ns_of(prefix)
local flow_on = redis.call('EXISTS', ns .. K_TOPIC_NAMES) == 1
local RECHECK_MS = 1000
local unpark = ns .. K_UNPARK
local topic_cfg = {}
local function tcfg(topic)
  local c = topic_cfg[topic]
  if c == nil then
    c = false
    if flow_on then
      local f = redis.call('HMGET', ns .. K_TOPIC .. topic, 'concurrency', 'rl_max', 'rl_per', 'rl_key')
      if f[1] or f[2] then
        c = { conc = tonumber(f[1]), rl_max = tonumber(f[2]), rl_per = tonumber(f[3]), rl_key = f[4] == '1' }
      end
    end
    topic_cfg[topic] = c
  end
  return c
end
-- nil when job `id` (hash fields h) may start now, true when it is a key_strict_fifo job
-- behind its key's head (it leaves the due sets: fifo_promote brings it back when the
-- jobs before it have left), else the ms to look at it again.
-- A start the rate limit allows is counted here (GCRA: one start per per/max ms,
-- up to max/20 at once), so call it last, right before take.
local function held(id, h, topic)
  local c = tcfg(topic)
  local pol = h.pol
  if pol == 'key_strict_fifo' then
    local ff = flow_key(ns, K_FLOW_FIFO, topic, h.key)
    local head = redis.call('ZRANGE', ff, '0', '0')[1]
    local pruned = false
    while head and head ~= id and redis.call('EXISTS', prefix .. head) == 0 do
      redis.call('ZREM', ff, head)  -- pruned or deleted without its entry: not a blocker
      head, pruned = redis.call('ZRANGE', ff, '0', '0')[1], true
    end
    if head ~= id then
      if pruned then fifo_promote(ns, topic, h.key) end  -- the new head may have been dropped
      return true
    end
  elseif pol then
    local holder = slot_holder(ns, prefix, pol, topic, h.key or '', 'running')
    if holder and holder ~= id then return now + RECHECK_MS end
  end
  if c and c.conc then
    local running = count_now(counts, topic .. '|running')
    if running >= c.conc then return now + RECHECK_MS end
  end
  if c and c.rl_max then
    local rk = flow_key(ns, K_FLOW_RATE, topic, c.rl_key and (h.key or '') or '')
    local interval = c.rl_per / c.rl_max
    local tolerance = (math.max(1, math.floor(c.rl_max / 20)) - 1) * interval
    local tat = math.max(tonumber(redis.call('GET', rk) or '0'), now)
    if tat > now + tolerance then return math.ceil(tat - tolerance) end
    redis.call('SET', rk, string.format('%.3f', tat + interval), 'PX', int(math.ceil(tat + interval - now) + 1000))
  end
  return nil
end
local function park(set, id, score, topic, at)
  redis.call('ZREM', set, id)
  redis.call('ZADD', ns .. K_PARKED .. topic, score, id)
  redis.call('ZADD', unpark, 'LT', int(at), topic)  -- the earliest reason to look again wins
end
-- Move parked jobs of topics whose time has come back to their due sets (a batch of
-- `limit` each); a job held again is parked again, which sets the topic's next look.
local ready = {}
if flow_on then
  ready = redis.call('ZRANGEBYSCORE', unpark, '-inf', now_s, 'LIMIT', '0', '16')
  for _, topic in ipairs(ready) do
    local pk = ns .. K_PARKED .. topic
    redis.call('ZREM', unpark, topic)
    local back = redis.call('ZRANGE', pk, '0', int(limit - 1), 'WITHSCORES')
    for i = 1, #back, 2 do
      redis.call('ZREM', pk, back[i])
      wait_add('', redis.call('HGET', prefix .. back[i], 'prio'), topic, due, '', back[i + 1], back[i])
    end
  end
end

-- Leases are batched (begin_batch in _lib.lua): written at the end of each page read, so
-- the next page and every read of a due set below see them.
begin_batch()

-- The due sets, highest priority first: {ns}:due:p:<p> for p > 0, {ns}:due (0), then p < 0.
local sets = { due }
local levels = redis.call('ZREVRANGE', due .. K_DUE_LEVELS, '0', '-1')
if #levels > 0 then
  sets = {}
  for _, p in ipairs(levels) do
    if tonumber(p) < 0 and sets[#sets] ~= due and not sets.zero then sets[#sets + 1] = due; sets.zero = true end
    sets[#sets + 1] = due .. K_DUE_PRIORITY .. p
  end
  if not sets.zero then sets[#sets + 1] = due end
end

-- With a filter (or flow control) at most `window` due jobs are looked at, so a
-- backlog of other topics cannot make a call unbounded; they are read a page of
-- `limit` at a time (jobs of other topics stay in the due set, before the page
-- that follows: skip past them).
local window = limit
if serve or flow_on then window = 1000 end
local scanned = 0
for _, set in ipairs(sets) do
  local skipped = 0
  while taken < limit and scanned < window do
    local size = math.min(limit, window - scanned)
    local ids = redis.call('ZRANGEBYSCORE', set, '-inf', now_s, 'LIMIT', int(skipped), int(size))
    local parked = 0
    for _, id in ipairs(ids) do
      if taken >= limit then break end
      scanned = scanned + 1
      local key = prefix .. id
      local h = fields(key)
      local topic = h.topic
      if not topic then
        redis.call('ZREM', set, id)  -- a due entry without its hash: drop the orphan
      elseif serve == nil or may_take(topic) then
        local at = flow_on and held(id, h, topic)
        if at == true then
          redis.call('ZREM', set, id)
          parked = parked + 1
        elseif at then
          park(set, id, h.due or h.run_at, topic, at)
          parked = parked + 1
        else
          take(key, id, h, topic, set)
          if h.fl == '1' and h.pol then move_slot(ns, h.pol, topic, h.key or '', id, h.state, 'running') end
        end
      else
        skipped = skipped + 1
      end
    end
    flush_batch()
    if (serve == nil and parked == 0) or #ids < size then break end
  end
  if set ~= due and redis.call('EXISTS', set) == 0 then
    redis.call('ZREM', due .. K_DUE_LEVELS, string.sub(set, #due + #K_DUE_PRIORITY + 1))  -- an emptied priority level
  end
end

-- A topic whose parked jobs were not all moved back, and none held again: the rest next.
for _, topic in ipairs(ready) do
  if redis.call('EXISTS', ns .. K_PARKED .. topic) == 1 and not redis.call('ZSCORE', unpark, topic) then
    redis.call('ZADD', unpark, now_s, topic)
  end
end

-- The earliest job left that this worker may take, in each due set: without a filter
-- the set's first; with one, among the first `window`: the first one alone (usually it
-- is), then pages of 64. A full batch: claim again at once.
local function earliest(set)
  if serve == nil then
    local nxt = redis.call('ZRANGE', set, '0', '0', 'WITHSCORES')
    return tonumber(nxt[2])
  end
  local from, size = 0, 1
  while from < window do
    local scan = redis.call('ZRANGE', set, int(from), int(math.min(from + size, window) - 1), 'WITHSCORES')
    for i = 1, #scan, 2 do
      local topic = redis.call('HGET', prefix .. scan[i], 'topic')
      if topic and may_take(topic) then return tonumber(scan[i + 1]) end
    end
    if #scan < 2 * size then break end
    from, size = from + size, 64
  end
  return nil
end
if taken >= limit and serve then out[1] = now end
for _, set in ipairs(sets) do
  if out[1] >= 0 and out[1] <= now then break end
  local at = earliest(set)
  if at and (out[1] < 0 or at < out[1]) then out[1] = at end
end
if recheck and (out[1] < 0 or recheck < out[1]) then out[1] = recheck end
if flow_on then
  local at = tonumber(redis.call('ZRANGE', unpark, '0', '0', 'WITHSCORES')[2])
  if at and (out[1] < 0 or at < out[1]) then out[1] = at end
end
-- Dead letters of the topics this worker listens to, when capacity is left; the
-- earliest one left counts for next_due_ms.
if #listened > 0 then
  local held = redis.call('SMISMEMBER', KEYS[7], unpack(listened))
  for i, topic in ipairs(listened) do
    if held[i] == 1 then
      local set = dl_prefix .. topic
      if taken < limit then
        local ids = redis.call('ZRANGEBYSCORE', set, '-inf', now_s, 'LIMIT', '0', int(limit - taken))
        for _, id in ipairs(ids) do
          local key = prefix .. id
          local h = fields(key)
          if h.topic == topic and (h.state == 'scheduled' or h.state == 'retrying') then
            take(key, id, h, topic, set)
          else
            redis.call('ZREM', set, id)  -- gone or no longer waiting: drop the stale entry
          end
        end
        flush_batch()
      end
      local first = redis.call('ZRANGE', set, '0', '0', 'WITHSCORES')
      if first[2] then
        local at = tonumber(first[2])
        if taken >= limit and at <= now then at = now end
        if out[1] < 0 or at < out[1] then out[1] = at end
      end
    end
  end
end
flush_batch(true)
local cron = redis.call('ZRANGE', KEYS[5], '0', '0', 'WITHSCORES')
if cron[2] then out[2] = tonumber(cron[2]) end
return out
