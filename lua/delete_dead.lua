-- delete_dead: remove a run from the dead-letter set for good. A one-time job whose dead
-- run this was is finished: it expires after the retention like a completed one.
--
-- KEYS[1] dead       ZSET    dead-letter set; score = when the run died (ms)
-- ARGV[1] prefix     string  shard key prefix
-- ARGV[2] member     string  the dead run, `<job id>:<due ms>`
-- ARGV[3] retention  ms      how long finished one-time jobs are kept
--
-- Derived keys: P..'job:'..id, P..'stats', P..'wf:'..wf (a node's job's workflow)
--
-- Returns: 1 removed, -1 no such dead run
--- @include "workflow"

local deadKey = KEYS[1]
local P = ARGV[1]
local member = ARGV[2]
local retention = ARGV[3]

if redis.call('ZREM', deadKey, member) == 0 then
  return -1
end
local id, due = split_run(member)
local jobKey = P .. 'job:' .. id
local j = redis.call('HMGET', jobKey, 'st', 'sk', 'q', 'r' .. due)
if not j[1] then
  -- The job is gone: its queue, and so its count, cannot be known.
  return 1
end
stat('d', j[3], -1)
flush_stats(P)
if run_get(j[4]).st == 'dead' then
  redis.call('HDEL', jobKey, 'r' .. due)
end
if field(j[2], 'at') == 'at' and j[1] == 'dead' then
  redis.call('PEXPIRE', jobKey, retention)
  -- A workflow node's: its workflow stays at least as long (include workflow).
  wf_dead_deleted(P, id, retention)
end
return 1
