-- list_jobs: read one page of job ids from sorted sets, walked in (set, score, id)
-- order after a cursor, keeping those of one state and/or topic. Reads only. The
-- cursor is re-resolved to a rank on every call, so jobs added or removed elsewhere
-- in a set never shift a page. The caller (store_reads.list_job_ids) passes the sets
-- of its walk in order, starting with the cursor's set (or the next one).
--
-- KEYS[1..] the sets to walk, in order
-- ARGV[1] job key prefix  ARGV[2] "1": the first set is the cursor's: start after
-- (ARGV[3] score, ARGV[4] id) in it; "0": from the start of the first set
-- ARGV[5] page size  ARGV[6] most members to examine (the work bound of one call,
-- >= page size)  ARGV[7] state to keep ("" for any)  ARGV[8] topic to keep ("" for any)
-- ARGV[9] key to keep ("" for any)  ARGV[10], ARGV[11] the lowest and highest score to
-- keep ("" for no bound): a set's members below the lowest are skipped by rank, not read,
-- and the walk leaves a set at its first member above the highest.
--
-- Returns { next set, next score, next id, id... }: the next page's cursor (next set:
-- its place in KEYS, 0 when nothing is left to walk), then the page's ids in order
-- (fewer than the page size when the work bound ran out first).
local sets = {}
for i = 1, #KEYS do sets[i] = KEYS[i] end
local prefix = ARGV[1]
local set_i, last = 1, #KEYS
local limit, budget = tonumber(ARGV[5]), tonumber(ARGV[6])
local want_state, want_topic, want_key = ARGV[7], ARGV[8], ARGV[9] or ''
local lowest, highest = ARGV[10] or '', ARGV[11] or ''
local top = highest ~= '' and tonumber(highest) or nil
local filtered = want_state ~= '' or want_topic ~= '' or want_key ~= ''
local CHUNK = 100

-- a <= b in memcmp order, the order of equal-score members in a sorted set
-- (Lua's own comparison follows the server's locale).
local function bytes_le(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a <= #b
end

-- The rank of the first member after (score, id): the member's own rank + 1 while
-- it holds that score, else a binary search among the members of that score.
local function rank_after(set, score, id)
  local own = redis.call('ZSCORE', set, id)
  if own and tonumber(own) == tonumber(score) then
    return redis.call('ZRANK', set, id) + 1
  end
  local lo = redis.call('ZCOUNT', set, '-inf', '(' .. score)
  local hi = lo + redis.call('ZCOUNT', set, score, score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_le(redis.call('ZRANGE', set, mid, mid)[1], id) then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- The first rank to read in a set: none below the lowest score kept.
local function floor_rank(set)
  local skipped = 0
  if lowest ~= '' then skipped = redis.call('ZCOUNT', set, '-inf', '(' .. lowest) end
  return skipped
end

local rank = floor_rank(sets[1])
if ARGV[2] == '1' then
  rank = math.max(rank, rank_after(sets[1], ARGV[3], ARGV[4]))
end
local page, examined = {}, 0
local at_set, at_score, at_id, at_rank = 0, '', '', 0
while set_i <= last and #page < limit and examined < budget do
  local set = sets[set_i]
  local chunk = redis.call('ZRANGE', set, rank, rank + math.min(CHUNK, budget - examined) - 1, 'WITHSCORES')
  if #chunk == 0 or (top and tonumber(chunk[2]) > top) then
    set_i = set_i + 1
    if set_i <= last then rank = floor_rank(sets[set_i]) end
  else
    local past = false
    for j = 1, #chunk, 2 do
      local id = chunk[j]
      if top and tonumber(chunk[j + 1]) > top then past = true break end
      local keep = true
      if filtered then
        local f = redis.call('HMGET', prefix .. id, 'state', 'topic', 'key')
        keep = (want_state == '' or f[1] == want_state) and (want_topic == '' or f[2] == want_topic)
          and (want_key == '' or f[3] == want_key)
      end
      if keep then page[#page + 1] = id end
      examined = examined + 1
      at_set, at_score, at_id, at_rank = set_i, chunk[j + 1], id, rank + (j - 1) / 2
      if #page == limit or examined == budget then break end
    end
    if past then
      set_i = set_i + 1
      if set_i <= last then rank = floor_rank(sets[set_i]) end
    else
      rank = at_rank + 1
    end
  end
end

-- Stopped early: is anything left after the last member examined?
local more = false
if at_set > 0 and (#page == limit or examined == budget) then
  more = redis.call('ZCARD', sets[at_set]) > at_rank + 1
  for i = at_set + 1, last do
    if not more and redis.call('ZCARD', sets[i]) > 0 then more = true end
  end
end
local out = { 0, '', '' }
if more then out = { at_set, at_score, at_id } end
for _, id in ipairs(page) do out[#out + 1] = id end
return out
