-- update_job: change a job's definition (payload, priority, retry policy, schedule) and,
-- when the schedule changed, move its next run. Runs that are ready, running or waiting
-- for a retry keep their time; ready runs take a new priority.
--
-- KEYS[1] buckets   ZSET    index of non-empty due buckets
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] bucket    ms      due bucket width
-- ARGV[3] id        string  job id
-- ARGV[4] olddh     string  the definition hash the caller read ('dh'); a differing one
--                           means a concurrent change: nothing is written
-- ARGV[5] newdh     string  the definition hash after the change
-- ARGV[6] kind      '' | 'at' | 'delay' | 'cron'  the new schedule ('' unchanged)
-- ARGV[7] when      at: due ms; delay: ms after now; cron: "from,c1,c2,..." ascending
--                   (see create_jobs), the first after now (common's cron_floor) is used
-- ARGV[8] ndel      count   definition fields to delete, that follow
-- ARGV[9] nset      count   definition field/value pairs to set, that follow the deletions
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats', and
--               the keys of the packed, cold and plain forms that thaw_job changes
--               (include forms)
--
-- Returns: { code, state, next, wake, queues, held }
--   code 1 updated, 0 not possible in the job's state (finished, or a one-time job whose
--   run has fired: state says which), -1 no such job, -4 no cron candidate after the
--   server's now (retry with fresh times), -5 the definition changed concurrently
--   next   the next due time filed (0 none); wake is next when the dispatcher should be
--          woken, else -1; queues received ready runs; held: members of runs a worker
--          claimed ahead of their start time (common's held_runs), sent back to be
--          claimed again with the new definition
--- @include "forms"

local bucketsKey = KEYS[1]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local id = ARGV[3]
local kind, when = ARGV[6], ARGV[7]
local ndel, nset = tonumber(ARGV[8]), tonumber(ARGV[9])

local jobKey = P .. 'job:' .. id
-- A packed or cold job becomes a job hash first (forms' thaw_job).
if redis.call('EXISTS', jobKey) == 0 then
  thaw_job(P, bucketsKey, bucketMs, id)
end
local j = redis.call('HMGET', jobKey, 'st', 'nx', 'q', 'pr', 'sk', 'rl', 'dh', 'ver', 'lf')
local st, q, oldPri, rl = j[1], j[3], j[4], j[6]
if not st then
  return { -1, '', 0, -1, {}, {} }
end
if final(st) then
  return { 0, st, 0, -1, {}, {} }
end
if j[7] ~= ARGV[4] then
  return { -5, st, 0, -1, {}, {} }
end
local once = field(j[5], 'at') == 'at'
local nx = tonumber(j[2]) or 0
local now = now_ms()

-- The new due time, when the schedule changes.
local due
if kind ~= '' then
  if once and nx == 0 then
    -- Its run has fired already (ready, running, waiting for a retry, or parked).
    return { 0, st, 0, -1, {}, {} }
  end
  due = due_of(kind, when, now, cron_floor(now, j[9]))
  if not due then
    return { -4, st, 0, -1, {}, {} }
  end
end

if ndel > 0 then
  redis.call('HDEL', jobKey, unpack(ARGV, 10, 9 + ndel))
end
if nset > 0 then
  redis.call('HSET', jobKey, unpack(ARGV, 10 + ndel, 9 + ndel + nset * 2))
end
local pri = redis.call('HGET', jobKey, 'pr')

-- Ready runs take the new priority.
if field(pri, '5') ~= field(oldPri, '5') then
  local rk = P .. 'ready:' .. field(q, 'default')
  for d in string.gmatch(rl or '', '[^,]+') do
    redis.call('ZADD', rk, 'XX', num(ready_score(pri, d)), id .. ':' .. d)
  end
end

local next, wake, state = nx, -1, st
if due then
  if st ~= 'paused' and nx > 0 then
    unfile_due(P, bucketsKey, bucketMs, id .. ':' .. num(nx), nx, q)
  end
  next = due
  if st == 'paused' then
    -- Resume files it (a recurring job at its first occurrence after the resume).
  elseif once and due <= now then
    new_run(id, num(due), q, pri)
    rl = rl_add(rl, num(due))
    next, state = 0, 'ready'
  else
    file_due(P, bucketsKey, bucketMs, id .. ':' .. num(due), due, q)
    wake = due
  end
  local fields = { 'nx', num(next), 'st', state, 'rl', rl or ',' }
  if not once then
    -- Plans made for the old schedule by a dispatcher are refused by fire_runs.
    fields[#fields + 1], fields[#fields + 2] = 'ver', num((tonumber(j[8]) or 1) + 1)
  end
  redis.call('HSET', jobKey, unpack(fields))
end
redis.call('HSET', jobKey, 'dh', ARGV[5])
local readied = flush_ready(P)
flush_stats(P)
return { 1, state, next, wake, readied, held_runs(jobKey, id, rl, now) }
