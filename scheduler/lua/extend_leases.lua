-- extend_leases: the heartbeat; push the lease deadline of running attempts.
--
-- KEYS[1] active zset
-- ARGV[1] now_ms  ARGV[2] lease_ms  ARGV[3] job key prefix
-- ARGV[4..] pairs: id, token
--
-- Returns the number of leases NOT extended (the token no longer holds them:
-- another worker recovered the job after this one stalled).
local active = KEYS[1]
local now, lease, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local lost = 0
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', prefix .. id, 'token') == token then
    redis.call('ZADD', active, 'XX', now + lease, id)
  else
    lost = lost + 1
  end
end
return lost
