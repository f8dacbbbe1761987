-- resume_job: undo pause_job: a one-time job's pending run is filed again at its time
-- (at once when that has passed), a recurring job is filed at its first occurrence after
-- now that the dispatcher has not handled yet (common's cron_floor), and parked runs
-- become ready.
--
-- KEYS[1] buckets     ZSET  index of non-empty due buckets
-- ARGV[1] prefix      string  shard key prefix
-- ARGV[2] bucket      ms      due bucket width
-- ARGV[3] id          string  job id
-- ARGV[4] candidates  ms,...  recurring jobs: "from,c1,c2,..." ascending, every occurrence
--                             after `from`; the first after now (common's cron_floor)
--                             is used ('' for one-time)
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats', and
--               the keys of the packed, cold and plain forms that thaw_job changes
--               (include forms)
--
-- Returns: { code, state, next, queues, wake }
--   code 1 resumed, 0 not paused (state says what it is), -1 no such job,
--   -4 no candidate after the server's now (clock skew: retry with fresh times)
--   next   the next due time filed (0 none); wake is next when the dispatcher should be
--          woken for it, else -1; queues received ready runs
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
local j = redis.call('HMGET', jobKey, 'st', 'nx', 'rl', 'q', 'pr', 'sk', 'ps', 'lf')
if not j[1] then
  return { -1, '', 0, {}, -1 }
end
if j[1] ~= 'paused' then
  return { 0, j[1], 0, {}, -1 }
end
local now = now_ms()
local next = tonumber(j[2]) or 0
local state = j[7] or 'scheduled'
if j[6] == 'cron' then
  local c = candidate(ARGV[4], cron_floor(now, j[8]))
  if not c then
    return { -4, 'paused', 0, {}, -1 }
  end
  next = tonumber(c)
  state = 'scheduled'
end
local active = false
for due in string.gmatch(j[3] or '', '[^,]+') do
  local member = id .. ':' .. due
  local r = run_get(redis.call('HGET', jobKey, 'r' .. due))
  if r.st == 'paused' then
    enqueue(r, member, j[4], j[5], due, 'ready')
    redis.call('HSET', jobKey, 'r' .. due, run_pack(r))
    if j[6] ~= 'cron' then
      state = 'ready'
    end
  end
  active = true
end
local wake = -1
if next > 0 then
  file_due(P, bucketsKey, bucketMs, id .. ':' .. num(next), next, j[4])
  wake = next
  if j[6] ~= 'cron' and not active then
    state = 'scheduled'
  end
end
redis.call('HSET', jobKey, 'st', state, 'nx', num(next))
redis.call('HDEL', jobKey, 'ps')
local readied = flush_ready(P)
flush_stats(P)
return { 1, state, next, readied, wake }
