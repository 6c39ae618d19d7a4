-- remove_cron: delete a schedule; jobs it already created are untouched.
--
-- KEYS[1] cron hash  KEYS[2] crons zset  KEYS[3] names set
-- ARGV[1] name
--
-- Returns the number of schedules deleted: 1, or 0 when there was none.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return redis.call('DEL', KEYS[1])
