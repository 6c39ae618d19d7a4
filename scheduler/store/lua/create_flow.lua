-- create_flow: a whole tree of jobs (Scheduler.flow, scheduler/core/flow_tree.py) in one step,
-- all or nothing. Every node is checked first (its id is new, its topic may live on this
-- partition, its topic's policy has its key and a free slot for it); only then are they
-- created, children before their parent, each parent waiting for its children as a job
-- scheduled after= them (_deps.lua) and marked with the root's id (`froot`: its listeners
-- read event.children_results). All on this partition: the caller placed the tree by its root.
--
-- KEYS[1] due zset  KEYS[2] outbox stream  KEYS[3] counts hash  KEYS[4] wake channel
-- ARGV[1] now_ms  ARGV[2] this partition's number ("" when the namespace is not partitioned)
-- ARGV[3] the root's id  ARGV[4] values per node; then per node, children first, the values
--   of enqueue.lua's arguments 1..29 (a parent's 28th: its children's ids; the 2nd, 15th,
--   16th, 22nd to 24th and 27th are not read).
--
-- Returns { CREATED (1) } when every node was created; else nothing is stored and it
-- returns { DUPLICATE (-10), id } (a job with this id exists), { KEY_REQUIRED (-11), id }
-- (the topic's policy is key_strict_fifo and the node has no key), { WRONG_PARTITION (-13),
-- home, id } (the node's topic lives on partition `home` only), or { REFUSED (3), holder,
-- policy, id } (the node's topic's policy keeps it out: `holder` holds its key's slot,
-- maybe another node of this flow).
local due, outbox, counts, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, part, root, width = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local ns = ns_of(due)
local count = (#ARGV - 4) / width

-- The root first: its id taken means this flow was created before (a retried call: ids are
-- idempotency keys), whatever ids its other nodes were given; checked children first, a
-- node's given id would refuse the retry as a FlowRefused instead.
if redis.call('EXISTS', ns .. K_JOB .. root) == 1 then return { -10, root } end

local function node(i)
  local b = 4 + (i - 1) * width
  local a = function(n) return ARGV[b + n] end
  return {
    id = a(1), due = a(3), topic = a(4), payload = a(5), meta = a(6), tz = a(7), run_at = a(8),
    max = a(9), btype = a(10), bdelay = a(11), timeout = a(12), trace = a(13), cron = a(14),
    bmax = a(17), bjit = a(18), dlq = a(19), froot = root,
  }, a(20), a(21), a(25), a(26), a(28), a(29)
end

-- Check every node; keep what creating it needs.
local nodes, configs, taken = {}, {}, {}
for i = 1, count do
  local job, jkey, prio, retry_given, timeout_given, parents, opf = node(i)
  if redis.call('EXISTS', ns .. K_JOB .. job.id) == 1 then return { -10, job.id } end
  local cfg = configs[job.topic]
  if not cfg then
    cfg = topic_config(ns .. K_TOPIC .. job.topic)
    configs[job.topic] = cfg
  end
  if cfg.home and part ~= '' and cfg.home ~= part then return { -13, cfg.home, job.id } end
  local pol = cfg.policy or 'standard'
  if pol == 'key_strict_fifo' and jkey == '' then return { -11, job.id } end
  local holder = flow_refusal(ns, pol, job.topic, jkey)
  if not holder and POLICY_SLOTS[pol] and POLICY_SLOTS[pol].scheduled then
    holder = taken[job.topic .. '\0' .. jkey]  -- (a node before it in this flow holds the slot)
    taken[job.topic .. '\0' .. jkey] = job.id
  end
  if holder then return { 3, holder, pol, job.id } end
  topic_defaults(job, cfg, retry_given, timeout_given)
  if prio == '' then prio = cfg.prio or '0' end
  nodes[i] = { job = job, jkey = jkey, prio = prio, pol = pol, parents = parents, opf = opf,
    flow = pol ~= 'standard' or cfg.concurrency or cfg.rl_max }
end

for i = 1, count do
  local n = nodes[i]
  local job = n.job
  local key = ns .. K_JOB .. job.id
  local set = wait_set('', n.prio, job.topic, due, '')
  if n.parents ~= '' then
    set, job.state, job.parents = ns .. K_WAITING_PARENTS, WAITING, n.parents
  end
  create_job(key, set, outbox, counts, now, job)
  if n.flow or n.jkey ~= '' or n.prio ~= '0' then
    flow_join(ns, due, key, job.id, job.topic, n.jkey, n.pol, n.prio, n.flow, nil)
  end
  if n.parents ~= '' then
    deps_link(ns, key, job.id, cjson.decode(n.parents), n.opf, now, outbox, counts)
  else
    wake_if_first(set, wake, job.id, job.due)
  end
end
return { 1 }
