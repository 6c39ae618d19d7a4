-- Shared helpers, prepended to every script by scripts.py (Redis has no include).
--
-- counts hash: field <state> and <topic>|<state> hold the number of jobs
-- currently in Redis in that state.

local function move_count(counts, topic, from, to)
  if from and from ~= '' then
    redis.call('HINCRBY', counts, from, -1)
    redis.call('HINCRBY', counts, topic .. '|' .. from, -1)
  end
  if to and to ~= '' then
    redis.call('HINCRBY', counts, to, 1)
    redis.call('HINCRBY', counts, topic .. '|' .. to, 1)
  end
end

-- Publish on the wake channel when `id` is now the earliest due job, so
-- sleeping workers re-plan; a later job changes nothing and costs no message.
local function wake_if_first(due, wake, id, due_ms)
  local first = redis.call('ZRANGE', due, 0, 0)
  if first[1] == id then
    redis.call('PUBLISH', wake, due_ms)
  end
end
