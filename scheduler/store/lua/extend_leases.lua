-- extend_leases: the heartbeat; push the lease deadline of running attempts.
--
-- KEYS[1] active zset
-- ARGV[1] now_ms  ARGV[2] lease_ms  ARGV[3] job key prefix
-- ARGV[4..] pairs: id, token
--
-- Returns the number of leases NOT extended because another worker holds the
-- job now (it recovered the job after this one stalled). A job that finished
-- while the heartbeat was on its way (token cleared) is not counted.
local active = KEYS[1]
local now, lease, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local deadline = int(now + lease)
local lost = 0
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local current = redis.call('HGET', prefix .. id, 'token')
  if current == token then
    redis.call('ZADD', active, 'XX', deadline, id)
  elseif current and current ~= '' then
    lost = lost + 1
  end
end
return lost
