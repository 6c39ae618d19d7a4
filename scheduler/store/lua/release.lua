-- release: a worker stopping gracefully gives unfinished attempts back; they
-- do not count as attempts and are due again at once.
--
-- KEYS[1] active zset  KEYS[2] due zset  KEYS[3] cancelled zset  KEYS[4] outbox
-- KEYS[5] counts hash  KEYS[6] wake channel
-- ARGV[1] now_ms  ARGV[2] job key prefix  ARGV[3] dead-letter set key prefix (a
-- released dead letter goes back to its set: wait_set)  ARGV[4..] pairs: id, token
--
-- Returns the number of jobs released.
local active, due, cancelled, outbox, counts, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now, prefix, dl_prefix = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local released = 0
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local key = prefix .. id
  local f = redis.call('HMGET', key, 'token', 'state', 'topic', 'attempts', 'worker', 'dl', 'prio', 'fl')
  if f[1] == token then
    redis.call('ZREM', active, id)
    local attempt = tonumber(f[4])
    emit(outbox, 'e', EV_ATTEMPT_RELEASED, 'id', id, 'ts', now, 'a', attempt, 'worker', f[5])
    redis.call('HSET', key, 'token', '', 'attempts', attempt - 1)
    if f[2] == 'cancelled' then
      redis.call('HSET', key, 'finished', now)
      redis.call('ZADD', cancelled, now, id)
    else
      local back = 'retrying'
      if attempt <= 1 then back = 'scheduled' end
      redis.call('HSET', key, 'state', back, 'due', now)
      local set = wait_add(f[6], f[7], f[3], due, dl_prefix, now, id)
      if f[8] == '1' then
        local fh = flow_fields(key)
        move_slot(ns_of(prefix), fh.pol, fh.topic, fh.key, id, 'running', back)
      end
      move_count(counts, f[3], f[2], back)
      wake_if_first(set, wake, id, now)
    end
    released = released + 1
  end
end
return released
