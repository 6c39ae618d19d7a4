-- remove_cron: delete a schedule; jobs it already created are untouched. A
-- worker removing a declared schedule gone from its code passes the topic it
-- read: the schedule is deleted only if it is still declared and of that topic
-- (a schedule_cron schedule of the same name, or one moved to a topic the
-- worker does not serve, is left alone).
--
-- KEYS[1] cron hash  KEYS[2] crons zset  KEYS[3] names set  KEYS[4] declared names set
-- ARGV[1] name  ARGV[2] "" any schedule, else the topic a declared one must have
--
-- Returns the number of schedules deleted: 1, or 0 when there was none (or the
-- guard of ARGV[2] did not hold).
local guard = ARGV[2] ~= '' and redis.call('HMGET', KEYS[1], 'declared', 'topic')
local deleted = 0
if not guard or (guard[1] == '1' and guard[2] == ARGV[2]) then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('SREM', KEYS[4], ARGV[1])
  deleted = redis.call('DEL', KEYS[1])
end
return deleted
