-- enqueue_many: enqueue.lua for many jobs in one call (schedule_many: scheduler/store/bulk.py),
-- so a batch pays the script's top level and Redis's per-call cost once, not once per job.
-- scripts.py compiles enqueue.lua's body in above this one as `enqueue_one(KEYS, ARGV)`; each
-- job is enqueued exactly as by its own enqueue.lua call (atomic as a whole here).
--
-- KEYS[1] due zset  KEYS[2] outbox stream  KEYS[3] counts hash  KEYS[4] wake channel
-- KEYS[5] active zset  KEYS[6] the namespace's lease counter
-- ARGV[1] job key prefix  ARGV[2] topic configuration key prefix (all share the namespace's
--         hash tag: the job and topic keys are built from them)
-- ARGV[3] G, the number of arguments per job
-- ARGV[4..] groups of G: enqueue.lua's ARGV for one job
--
-- Returns one enqueue.lua reply per job, in order.
local job_prefix, topic_prefix, g = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV, g do
  local args = { unpack(ARGV, i, i + g - 1) }
  out[#out + 1] = enqueue_one({ job_prefix .. args[1], KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
    topic_prefix .. args[4], KEYS[6] }, args)
end
return out
