-- trigger_job: fire a job now, outside its schedule. A recurring job gets an extra run and
-- keeps its schedule; a one-time job that has not fired yet fires now instead of later.
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
-- Returns: { code, state, member, queue }
--   code 1 triggered (member is the new run), 0 nothing to do: the job is paused, in a
--   final state, or a one-time job whose run is already under way (state says which),
--   -1 no such job
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
local j = redis.call('HMGET', jobKey, 'st', 'nx', 'q', 'pr', 'sk', 'rl', 'h')
if not j[1] then
  return { -1, '', '', '' }
end
if final(j[1]) or j[1] == 'paused' then
  return { 0, j[1], '', '' }
end
local nx = tonumber(j[2]) or 0
if j[5] ~= 'cron' then
  if nx == 0 then
    return { 0, j[1], '', '' }
  end
  unfile_due(P, bucketsKey, bucketMs, id .. ':' .. j[2], nx, j[3])
  redis.call('HSET', jobKey, 'st', 'ready', 'nx', 0)
end
local due = now_ms()
-- A run is named by its job and due time: the new run takes a millisecond no active run
-- has, nor the newest ended one (the head of the history), whose record and result the
-- run of the same name would overwrite (a trigger in the millisecond of a run that has
-- been triggered, claimed and acked already).
local newest = j[7] and string.match(j[7], '^[^\n]*')
newest = newest and tonumber(string.match(newest, '^(%d+),') or string.match(newest, '"d":(%d+)'))
if newest and due <= newest then
  due = newest + 1
end
while rl_has(j[6], num(due)) do
  due = due + 1
end
local member = new_run(id, num(due), j[3], j[4])
redis.call('HSET', jobKey, 'rl', rl_add(j[6], num(due)))
flush_ready(P)
flush_stats(P)
return { 1, j[5] == 'cron' and j[1] or 'ready', member, field(j[3], 'default') }
