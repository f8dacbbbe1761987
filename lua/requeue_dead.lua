-- requeue_dead: give a dead run a fresh set of attempts: it leaves the dead-letter set and
-- becomes ready again (parked when its job is paused).
--
-- KEYS[1] dead     ZSET    dead-letter set; score = when the run died (ms)
-- ARGV[1] prefix   string  shard key prefix
-- ARGV[2] member   string  the dead run, `<job id>:<due ms>`
--
-- Derived keys: P..'job:'..id, P..'ready:'..queue, P..'stats'
--
-- Returns: { code, state, queues }
--   code 1 requeued (state is the job's state now), 0 the job was cancelled or completed
--   since (state says which; the entry stays), -1 no such dead run (a dead run whose job
--   is gone is removed)
--- @include "common"

local deadKey = KEYS[1]
local P = ARGV[1]
local member = ARGV[2]

if not redis.call('ZSCORE', deadKey, member) then
  return { -1, '', {} }
end
local id, due = split_run(member)
local jobKey = P .. 'job:' .. id
local j = redis.call('HMGET', jobKey, 'st', 'sk', 'q', 'pr', 'rl', 'r' .. due)
if not j[1] then
  redis.call('ZREM', deadKey, member)
  return { -1, '', {} }
end
local st, q, pri, rl = j[1], j[3], j[4], j[5]
if st == 'cancelled' or st == 'completed' then
  return { 0, st, {} }
end
local once = field(j[2], 'at') == 'at'
local r = run_get(j[6])
r.att, r.tok, r.ra, r.er = 0, '', '', ''
enqueue(r, member, q, pri, due, st)
local state = st
if once and st ~= 'paused' then
  state = 'ready'
end
redis.call('HSET', jobKey, 'r' .. due, run_pack(r), 'rl', rl_add(rl, due), 'st', state)
redis.call('ZREM', deadKey, member)
stat('d', q, -1)
local readied = flush_ready(P)
flush_stats(P)
return { 1, state, readied }
