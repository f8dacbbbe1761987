-- pause_job: stop a job from starting runs: its next occurrence leaves the due set and
-- its ready runs are parked. Running runs go on; runs that a worker claimed ahead of
-- their start time and has not started are returned, to be sent back (common's
-- held_runs), and are parked when their worker hands them back; retries that come due
-- while paused are parked too. Idempotent.
--
-- KEYS[1] buckets  ZSET  index of non-empty due buckets
-- ARGV[1] prefix   string  shard key prefix
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] id       string  job id
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats', and
--               the keys of the packed, cold and plain forms that thaw_job changes
--               (include forms)
--
-- Returns: { code, state, held } code 1 paused now, 0 nothing to do (already paused, or
--          a final state), -1 no such job; held: members of runs held ahead of their start
--          time (common's held_runs)
--- @include "forms"

local bucketsKey = KEYS[1]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local id = ARGV[3]

local jobKey = P .. 'job:' .. id
-- A packed or cold job becomes a job hash first (forms' thaw_job).
if redis.call('EXISTS', jobKey) == 0 then
  thaw_job(P, bucketsKey, bucketMs, id)
end
local j = redis.call('HMGET', jobKey, 'st', 'nx', 'rl', 'q')
if not j[1] then
  return { -1, '', {} }
end
if final(j[1]) or j[1] == 'paused' then
  return { 0, j[1], {} }
end
local nx = tonumber(j[2]) or 0
if nx > 0 then
  unfile_due(P, bucketsKey, bucketMs, id .. ':' .. j[2], nx, j[4])
end
for due in string.gmatch(j[3] or '', '[^,]+') do
  local member = id .. ':' .. due
  if redis.call('ZREM', P .. 'ready:' .. field(j[4], 'default'), member) == 1 then
    local r = run_get(redis.call('HGET', jobKey, 'r' .. due))
    r.st = 'paused'
    redis.call('HSET', jobKey, 'r' .. due, run_pack(r))
  end
end
redis.call('HSET', jobKey, 'st', 'paused', 'ps', j[1])
flush_stats(P)
return { 1, 'paused', held_runs(jobKey, id, j[3], now_ms()) }
