-- Flow control helpers (scheduler/core/flow.py, docs/how-to/flow-control.md), prepended to
-- every script after _lib.lua. A job takes part when its hash has fl = "1"
-- (set by enqueue.lua when it has a key, a policy other than standard, a
-- dedupe that lasts until it finishes, or a topic with a concurrency or rate
-- limit); its fields say how: key, pol (the topic's policy when it was
-- created), dd (a dedupe key held until it finishes), prio (absent = 0).
--
-- Keys (<n> is the topic's length, so no topic/key pair names another's key):
--   {ns}:ks:<n>:<topic>:<key>   hash: the key's policy slots (POLICY_SLOTS) -> holder id
--   {ns}:ff:<n>:<topic>:<key>   zset: a key_strict_fifo key's unfinished jobs, creation order
--   {ns}:fifo_blocked:<topic>   set: key_strict_fifo keys whose oldest job failed
--   {ns}:dd:<n>:<topic>:<dd>    string: the job holding a dedupe key
--   {ns}:pk:<topic>             zset: a topic's due jobs claim parked (a limit held them), by due
--   {ns}:unpark                 zset: topic -> ms when claim moves its parked jobs back
--   {ns}:rl:<n>:<topic>:<key>   string: a rate limit's theoretical arrival time (GCRA), ms
--   {ns}:due:p:<prio>           zset: due jobs of a priority other than 0 (0: {ns}:due)
--   {ns}:due:levels             zset: the priorities other than 0 with waiting jobs

local function flow_key(ns, kind, topic, key)
  return ns .. kind .. ':' .. #topic .. ':' .. topic .. ':' .. (key or '')
end

-- The namespace prefix "{ns}:" of a job key "{ns}:j:<id>" or a prefix "{ns}:j:".
local function ns_of(job_key)
  return string.match(job_key, '^(%b{}:)')
end

-- The slots a policy limits per key: job state -> slot field in the key's hash.
-- short: 1 waiting; singleton: 1 running; stately: 1 per state; exclusive: 1
-- unfinished. key_strict_fifo is kept by the ff zset instead.
local POLICY_SLOTS = {
  short = { scheduled = 'w' },
  singleton = { running = 'r' },
  stately = { scheduled = 'w', running = 'r', retrying = 't' },
  exclusive = { scheduled = 'x', running = 'x', retrying = 'x' },
}

-- The job holding the slot that state `state` needs under policy `pol`, or nil when
-- it is free. A holder no longer in a state of that slot (finished, deleted) frees it.
local function slot_holder(ns, job_prefix, pol, topic, key, state)
  local slots = POLICY_SLOTS[pol]
  local slot = slots and slots[state]
  if not slot then return nil end
  local ks = flow_key(ns, K_FLOW_SLOTS, topic, key)
  local holder = redis.call('HGET', ks, slot)
  if not holder then return nil end
  local st = redis.call('HGET', job_prefix .. holder, 'state')
  if st and slots[st] == slot then return holder end
  redis.call('HDEL', ks, slot)
  return nil
end

-- Job `id` moves from state `from` to `to` (nil: it leaves, finished or deleted):
-- release the slot it held and take the one it needs.
local function move_slot(ns, pol, topic, key, id, from, to)
  local slots = POLICY_SLOTS[pol]
  if not slots then return end
  local a, b = from and slots[from], to and slots[to]
  if a == b then return end
  local ks = flow_key(ns, K_FLOW_SLOTS, topic, key)
  if a and redis.call('HGET', ks, a) == id then redis.call('HDEL', ks, a) end
  if b then redis.call('HSET', ks, b, id) end
end

-- The flow fields of a job hash (HMGET), as a table; nil when it takes no part.
local function flow_fields(job_key)
  local f = redis.call('HMGET', job_key, 'fl', 'topic', 'key', 'pol', 'dd', 'state')
  if f[1] ~= '1' then return nil end
  return { topic = f[2], key = f[3] or '', pol = f[4] or '', dd = f[5], state = f[6] }
end

-- The set a waiting job waits in: a dead letter (dl = "1") in its topic's
-- dead-letter set, which only workers with a listener for that topic claim from
-- (claim.lua), so no-listener completion never reaches it; a job of priority p ~= 0
-- in {ns}:due:p:<p>; any other in the due set.
local function wait_set(dl, prio, topic, due, dl_prefix)
  if dl == '1' then return dl_prefix .. topic end
  if prio and prio ~= '' and prio ~= '0' then return due .. K_DUE_PRIORITY .. prio end
  return due
end

-- Put job `id` in its wait set (wait_set) at `score`; the set's name (for wake_if_first).
local function wait_add(dl, prio, topic, due, dl_prefix, score, id)
  local set = wait_set(dl, prio, topic, due, dl_prefix)
  redis.call('ZADD', set, score, id)
  if set ~= due and dl ~= '1' then redis.call('ZADD', due .. K_DUE_LEVELS, prio, prio) end
  return set
end

-- The job holding dedupe key `dd` of `topic` and its state, or nil: with a `window`
-- ("" for none) the key expires by itself, so any holder still stored counts; without
-- one only an unfinished holder does.
local function dedupe_holder(ns, topic, dd, window)
  local holder = redis.call('GET', flow_key(ns, K_FLOW_DEDUPE, topic, dd))
  local state = holder and redis.call('HGET', ns .. K_JOB .. holder, 'state')
  if state and (window ~= '' or (state ~= 'completed' and state ~= 'failed' and state ~= 'cancelled')) then
    return holder, state
  end
  return nil
end

-- Job `id` holds dedupe key `dd` of `topic`: for `window` ms, or ("") until it finishes
-- (then it must take part in flow control with field dd: flow_leave frees the key).
local function dedupe_hold(ns, topic, dd, window, id)
  if window == '' then
    redis.call('SET', flow_key(ns, K_FLOW_DEDUPE, topic, dd), id)
  else
    redis.call('SET', flow_key(ns, K_FLOW_DEDUPE, topic, dd), id, 'PX', window)
  end
end

-- A new job (`dropped`) was kept out by the job holding its slot: recorded on the
-- holder (its dups count and a `deduplicated` event), never a silent drop.
local function record_refusal(ns, outbox, holder, reason, dropped, now)
  redis.call('HINCRBY', ns .. K_JOB .. holder, 'dups', '1')
  emit(outbox, 'e', EV_DEDUPLICATED, 'id', holder, 'ts', now, 'a', '0', 'reason', reason, 'dropped', dropped)
end

-- The job that keeps a new job of `topic` and `key` out under policy `pol` (short,
-- stately, exclusive: their waiting slot is taken), or nil.
local function flow_refusal(ns, pol, topic, key)
  if pol == 'standard' or pol == 'key_strict_fifo' then return nil end
  return slot_holder(ns, ns .. K_JOB, pol, topic, key, 'scheduled')
end

-- A new job (hash `job_key`, already created) joins flow control: its fields key, prio,
-- fl, pol and dd (`dd`: a dedupe key it holds until it finishes), its priority level,
-- and its key's slot or FIFO place. `flow`: it takes part (fl, see the top).
local function flow_join(ns, due, job_key, id, topic, key, pol, prio, flow, dd)
  local extra = {}
  if key ~= '' then extra[#extra + 1] = 'key'; extra[#extra + 1] = key end
  if prio ~= '0' then
    extra[#extra + 1] = 'prio'; extra[#extra + 1] = prio
    redis.call('ZADD', due .. K_DUE_LEVELS, prio, prio)
  end
  if flow then
    extra[#extra + 1] = 'fl'; extra[#extra + 1] = '1'
    if pol ~= 'standard' then extra[#extra + 1] = 'pol'; extra[#extra + 1] = pol end
  end
  if dd then extra[#extra + 1] = 'dd'; extra[#extra + 1] = dd end
  if #extra > 0 then redis.call('HSET', job_key, unpack(extra)) end
  if pol == 'key_strict_fifo' then
    redis.call('ZADD', flow_key(ns, K_FLOW_FIFO, topic, key), redis.call('INCR', ns .. K_FIFO_SEQ), id)
  elseif pol ~= 'standard' then
    move_slot(ns, pol, topic, key, id, nil, 'scheduled')
  end
end

-- A key_strict_fifo key's oldest unfinished job (its head) back in its wait set, once the
-- job before it left: claim drops a job that is not its key's head from the due sets
-- (the key's ff zset keeps it), so only this brings it back. Heads whose hash is gone
-- (pruned) are skipped, as claim does.
local function fifo_promote(ns, topic, key)
  local ff = flow_key(ns, K_FLOW_FIFO, topic, key)
  local head = redis.call('ZRANGE', ff, '0', '0')[1]
  while head and redis.call('EXISTS', ns .. K_JOB .. head) == 0 do
    redis.call('ZREM', ff, head)
    head = redis.call('ZRANGE', ff, '0', '0')[1]
  end
  if not head then return end
  local f = redis.call('HMGET', ns .. K_JOB .. head, 'state', 'due', 'run_at', 'prio', 'dl')
  if (f[1] ~= 'scheduled' and f[1] ~= 'retrying') or f[5] == '1' then return end
  local score = f[2] or f[3]
  redis.call('ZREM', ns .. K_PARKED .. topic, head)
  local set = wait_add('', f[4], topic, ns .. K_DUE, '', score, head)
  wake_if_first(set, ns .. K_WAKE, head, score)
end

-- A job taking part in flow control (fields `fh`: flow_fields) finishes or is deleted
-- (from state `from`): free its slots, its dedupe key and, key_strict_fifo, its place
-- (the key's next job goes back to its wait set: fifo_promote), unless it failed
-- (`failed`: its key stays blocked until it is retried or deleted); and let claim look
-- at the topic's parked jobs again at once (a wake-up when it had planned later).
local function flow_leave(ns, id, fh, from, failed, now_s)
  local topic, key, pol = fh.topic, fh.key, fh.pol
  move_slot(ns, pol, topic, key, id, from, nil)
  if pol == 'key_strict_fifo' then
    if failed then
      redis.call('SADD', ns .. K_FIFO_BLOCKED .. topic, key)
    else
      redis.call('ZREM', flow_key(ns, K_FLOW_FIFO, topic, key), id)
      if from == 'failed' then redis.call('SREM', ns .. K_FIFO_BLOCKED .. topic, key) end
      fifo_promote(ns, topic, key)
    end
  end
  if fh.dd and fh.dd ~= '' then
    local ddk = flow_key(ns, K_FLOW_DEDUPE, topic, fh.dd)
    if redis.call('GET', ddk) == id then redis.call('DEL', ddk) end
  end
  -- parked jobs wait for this mark: when it moved to now, wake the sleeping workers (they
  -- planned their next claim for the old mark, up to claim's RECHECK_MS away)
  if redis.call('ZADD', ns .. K_UNPARK, 'XX', 'LT', 'CH', now_s, topic) == 1 then
    redis.call('PUBLISH', ns .. K_WAKE, now_s)
  end
end

