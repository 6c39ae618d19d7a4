-- put_topic: create or replace a topic's configuration hash, unless it would
-- change the stored policy (a topic's policy is fixed once stored, as in
-- pg-boss: delete the topic to choose another). Fields not given are removed.
--
-- KEYS[1] topic hash  KEYS[2] topic names set
-- ARGV[1] name  ARGV[2] policy
-- ARGV[3..] field, value pairs of the other options (layout: scheduler/core/topic_options.py)
--
-- Returns (scripts.TopicCode) {code, stored policy or ''}: CREATED (1) no
-- configuration before, UPDATED (2) replaced, POLICY_LOCKED (3) the stored
-- policy differs: nothing written.
local topic, names = KEYS[1], KEYS[2]
local name, policy = ARGV[1], ARGV[2]
local cur = redis.call('HGET', topic, 'policy')
if cur and cur ~= policy then return {3, cur} end
redis.call('DEL', topic)
local fields = {'policy', policy}
for i = 3, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
end
redis.call('HSET', topic, unpack(fields))
redis.call('SADD', names, name)
if cur then return {2, cur} end
return {1, ''}
