-- Dependency helpers (`after=`: scheduler/core/dependencies.py, docs/how-to/dependencies.md),
-- prepended after _flow.lua. A job scheduled after parents (a child) is created in state
-- waiting_for_parents, in {ns}:wfp (by due ms) and in no due set; its hash has
--   parents  the JSON list of its parents' ids (as scheduled)
--   wp       how many of them are not done yet
--   opf      what a parent's failure does: ignore | cancel (absent: fail)
-- and a job some child waits for has hc = "1" (so the scripts that end a job read one
-- more field, and only a job with children pays for the rest).
--
-- Keys: {ns}:ch:<id>  set: the children waiting for job id; once it ended: none when it
--                     completed, else the children it failed or cancelled (each with `pf`,
--                     the parent that ended it), which an operator's retry of it re-arms
--                     (deps_rearm)
--       {ns}:pr:<id>  hash: a child's parents, parent id -> result JSON ("null": none, or a
--                     failed parent its child ignores; "": not ended yet); read by claim
--                     (deps_results), once none is pending
-- A child lives on its parents' partition (scheduler/store/redis.py), so all of this is
-- one slot and every change stays one script.
local WAITING = 'waiting_for_parents'

-- A waiting child whose last parent is done becomes due at max(its due, now), in its
-- wait set (a priority's, as enqueue places it), and wakes workers when it is the first.
local function deps_release(ns, key, id, run_at, due_s, topic, prio, now_s, counts)
  if tonumber(now_s) > tonumber(due_s) then due_s = now_s end
  if due_s == run_at then
    redis.call('HSET', key, 'state', 'scheduled')
    redis.call('HDEL', key, 'due', 'wp')
  else
    redis.call('HSET', key, 'state', 'scheduled', 'due', due_s)
    redis.call('HDEL', key, 'wp')
  end
  redis.call('ZREM', ns .. K_WAITING_PARENTS, id)
  local set = wait_add('', prio, topic, ns .. K_DUE, '', due_s, id)
  move_count(counts, topic, WAITING, 'scheduled')
  wake_if_first(set, ns .. K_WAKE, id, due_s)
end

-- A waiting child one of whose parents failed (for good, cancelled or deleted) ends by its
-- mode: cancelled ("cancel"), else failed with outcome parent_failed, no attempt, and its
-- own failed and schedule.failed events (the audit's terminal failure).
local function deps_end(ns, key, id, topic, w, fl, mode, parent, now_s, outbox, counts)
  redis.call('ZREM', ns .. K_WAITING_PARENTS, id)
  if redis.call('EXISTS', ns .. K_JOB .. parent) == 1 then  -- (not a parent deleted before)
    redis.call('SADD', ns .. K_CHILDREN .. parent, id)  -- (re-armed if the parent is retried)
  end
  if fl == '1' then flow_leave(ns, id, flow_fields(key), WAITING, false, now_s) end
  if mode == 'cancel' then
    redis.call('HSET', key, 'state', 'cancelled', 'finished', now_s, 'pf', parent)
    redis.call('ZADD', ns .. K_CANCELLED, now_s, id)
    move_count(counts, topic, WAITING, 'cancelled')
    emit(outbox, 'e', EV_CANCELLED, 'id', id, 'ts', now_s, 'a', '0', 'running', '0', 'parent', parent)
  else
    local err = cjson.encode({ type = 'ParentFailed', traceback = '',
      message = 'parent job ' .. parent .. ' did not complete (failed, cancelled or deleted)' })
    redis.call('HSET', key, 'state', 'failed', 'finished', now_s, 'outcome', OUTCOME_PARENT_FAILED,
      'last_error', err, 'pf', parent)
    redis.call('ZADD', ns .. K_FAILED, now_s, id)
    move_count(counts, topic, WAITING, 'failed')
    emit(outbox, 'e', EV_FAILED, 'id', id, 'ts', now_s, 'a', '0', 'error', err, 'finished', now_s,
      'outcome', OUTCOME_PARENT_FAILED, 'parent', parent)
    emit(outbox, 'e', EV_SCHEDULE_FAILED, 'id', id, 'ts', now_s, 'a', '0')
  end
  notify_done(w, ns .. K_DONE, id)
end

-- Job `parent` ended: completed (`ok`, with `result`, "" for none) or not (failed for good,
-- cancelled, deleted). Each child waiting for it counts it done (its result kept) or applies
-- its mode; a child that ends so is a failed parent to its own children, in turn.
local function deps_parent_ended(ns, parent, ok, result, now_s, outbox, counts)
  local queue, oks, results, i = { parent }, { ok }, { result }, 1
  while i <= #queue do
    local p, pok, pres = queue[i], oks[i], results[i]
    i = i + 1
    local ck = ns .. K_CHILDREN .. p
    local kids = redis.call('SMEMBERS', ck)
    redis.call('DEL', ck)
    table.sort(kids)  -- (one order, whatever the set's encoding: the events follow it)
    for _, c in ipairs(kids) do
      local key = ns .. K_JOB .. c
      local f = redis.call('HMGET', key, 'state', 'opf', 'topic', 'run_at', 'due', 'prio', 'w', 'fl', 'hc')
      -- Only a child still waiting for `p` (its `pr` field for p is '' until p ends): a child
      -- deleted while p ran stays in p's children set, and its id may name another job since.
      if f[1] == WAITING and redis.call('HGET', ns .. K_PARENT_RESULTS .. c, p) == '' then
        local mode = f[2] or 'fail'
        if pok or mode == 'ignore' then
          local value = 'null'
          if pok and pres and pres ~= '' then value = pres end
          redis.call('HSET', ns .. K_PARENT_RESULTS .. c, p, value)
          if redis.call('HINCRBY', key, 'wp', '-1') <= 0 then
            deps_release(ns, key, c, f[4], f[5] or f[4], f[3], f[6], now_s, counts)
          end
        else
          deps_end(ns, key, c, f[3], f[7], f[8], mode, p, now_s, outbox, counts)
          if f[9] == '1' then
            queue[#queue + 1], oks[#oks + 1], results[#results + 1] = c, false, ''
          end
        end
      end
    end
  end
end

-- A new child (already created waiting: create_job with j.state = WAITING) joins its
-- parents (`parents`, ids known to exist): a completed one counts done at once (its result
-- copied), a failed or cancelled one applies `mode` at once, any other gets the child in
-- its children set. Then the child ends, or is released when no parent is left to wait for.
local function deps_link(ns, key, id, parents, mode, now_s, outbox, counts)
  local left, failed_parent = 0, nil
  local pr = ns .. K_PARENT_RESULTS .. id
  for _, p in ipairs(parents) do
    local pk = ns .. K_JOB .. p
    local f = redis.call('HMGET', pk, 'state', 'result')
    if f[1] == 'completed' then
      redis.call('HSET', pr, p, f[2] or 'null')
    elseif f[1] == 'failed' or f[1] == 'cancelled' or not f[1] then
      -- (no state: deleted since; only a re-armed child meets that, a new one's parents exist)
      if mode == 'ignore' then
        redis.call('HSET', pr, p, 'null')
      elseif not failed_parent then
        failed_parent = p
        if f[1] then redis.call('HSET', pk, 'hc', '1') end  -- (its retry re-arms this child)
      end
    else
      left = left + 1
      redis.call('HSET', pr, p, '')  -- pending: deps_parent_ended sets its result
      redis.call('SADD', ns .. K_CHILDREN .. p, id)
      redis.call('HSET', pk, 'hc', '1')
    end
  end
  if mode == 'fail' then
    redis.call('HSET', key, 'wp', int(left))
  else
    redis.call('HSET', key, 'wp', int(left), 'opf', mode)
  end
  if failed_parent or left == 0 then
    local f = redis.call('HMGET', key, 'topic', 'run_at', 'due', 'prio', 'w', 'fl')
    if failed_parent then
      deps_end(ns, key, id, f[1], f[5], f[6], mode, failed_parent, now_s, outbox, counts)
    else
      deps_release(ns, key, id, f[2], f[3] or f[2], f[1], f[4], now_s, counts)
    end
  end
end

-- Job `parent` runs again (an operator's retry): every child it failed or cancelled (still so,
-- `pf` naming it) waits again, for it and for its other parents as they stand now (deps_link:
-- one that completed meanwhile counts done, one that failed applies the child's mode again),
-- with `retried` recorded; a child waiting again re-arms its own children in turn.
local function deps_rearm(ns, parent, now_s, outbox, counts)
  local queue, i = { parent }, 1
  while i <= #queue do
    local p = queue[i]
    i = i + 1
    local ck = ns .. K_CHILDREN .. p
    local kids = redis.call('SMEMBERS', ck)
    redis.call('DEL', ck)
    table.sort(kids)
    for _, c in ipairs(kids) do
      local key = ns .. K_JOB .. c
      local f = redis.call('HMGET', key, 'state', 'pf', 'topic', 'parents', 'opf', 'hc', 'attempts', 'run_at',
        'due', 'fl')
      if f[2] == p and (f[1] == 'failed' or f[1] == 'cancelled') then
        redis.call('ZREM', ns .. K_FAILED, c)
        redis.call('ZREM', ns .. K_CANCELLED, c)
        redis.call('HDEL', key, 'finished', 'outcome', 'pf')
        redis.call('HSET', key, 'state', WAITING)
        redis.call('ZADD', ns .. K_WAITING_PARENTS, f[9] or f[8], c)
        redis.call('DEL', ns .. K_PARENT_RESULTS .. c)
        move_count(counts, f[3], f[1], WAITING)
        if f[10] == '1' then
          local fh = flow_fields(key)
          move_slot(ns, fh.pol, fh.topic, fh.key, c, nil, 'scheduled')
        end
        emit(outbox, 'e', EV_RETRIED, 'id', c, 'ts', now_s, 'a', f[7] or '0', 'from', f[1],
          'due', f[9] or f[8], 'actor', 'parent ' .. p)
        deps_link(ns, key, c, cjson.decode(f[4]), f[5] or 'fail', now_s, outbox, counts)
        if f[6] == '1' and redis.call('HGET', key, 'state') == WAITING then queue[#queue + 1] = c end
      end
    end
  end
end

-- The fields of a job `rerun` reads (HMGET job unpack(RERUN_FIELDS)).
local RERUN_FIELDS = { 'state', 'topic', 'attempts', 'token', 'dl', 'prio', 'fl', 'hc' }

-- Run a failed or cancelled job with no attempt in flight again (an operator's retry, or the
-- replay of its dead letter while children wait for it): its attempt counter starts again from
-- 0 (the full max_attempts budget), it is due now, `retried` records the attempts of the run
-- that ended (the audit numbers attempts on from there), and the children its end failed or
-- cancelled wait for it again (deps_rearm). last_error is kept until a new attempt replaces it.
-- `f`: its RERUN_FIELDS; `dl_prefix`: the dead-letter sets' key prefix (a dead letter waits
-- in its set again: wait_add).
local function rerun(job, id, f, due, failed, cancelled, dl_prefix, now, actor, outbox, counts, wake)
  local state = f[1]
  redis.call('ZREM', failed, id)
  redis.call('ZREM', cancelled, id)
  -- (pg: the new run's attempt 1 reports afresh; result: a cancelled job's late one is not
  -- this run's; pf: no parent's failure ended this run)
  redis.call('HDEL', job, 'attempts', 'finished', 'outcome', 'pg', 'result', 'pf')
  redis.call('HSET', job, 'state', 'scheduled', 'due', now)
  local set = wait_add(f[5], f[6], f[2], due, dl_prefix, now, id)
  if f[7] == '1' then
    -- back in its key's slots and, a failed key_strict_fifo job (still its key's oldest),
    -- its key unblocked
    local fh, ns = flow_fields(job), ns_of(job)
    move_slot(ns, fh.pol, fh.topic, fh.key, id, nil, 'scheduled')
    if fh.pol == 'key_strict_fifo' then redis.call('SREM', ns .. K_FIFO_BLOCKED .. fh.topic, fh.key) end
  end
  move_count(counts, f[2], state, 'scheduled')
  emit(outbox, 'e', EV_RETRIED, 'id', id, 'ts', now, 'a', f[3] or '0', 'from', state, 'due', now, 'actor', actor)
  if f[8] == '1' then deps_rearm(ns_of(job), id, now, outbox, counts) end
  wake_if_first(set, wake, id, now)
end

-- The JSON object parent id -> result of a child being claimed (its `pr` hash, without the
-- parents still pending), results as stored (never decoded and encoded again).
local function deps_results(ns, id)
  local flat = redis.call('HGETALL', ns .. K_PARENT_RESULTS .. id)
  local parts = {}
  for i = 1, #flat, 2 do  -- (a pending parent: a failed child retried by an operator)
    if flat[i + 1] ~= '' then parts[#parts + 1] = cjson.encode(flat[i]) .. ':' .. flat[i + 1] end
  end
  return '{' .. table.concat(parts, ',') .. '}'
end
