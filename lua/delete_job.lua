-- delete_job: remove a job and every run of it now, whatever its state and form. Its
-- scheduled, ready, waiting and buffered runs leave their sets; its running runs leave
-- the inflight set and are returned, for their workers to be interrupted (a worker's later
-- report finds no run: its token is refused); its dead runs leave the dead-letter set;
-- then the job hash goes. Unlike cancel_job, nothing is kept for the retention, and the
-- per-queue counts drop at once.
--
-- KEYS[1] buckets   ZSET  index of non-empty due buckets
-- KEYS[2] dead      ZSET  dead-letter set
-- KEYS[3] inflight  ZSET  claimed runs; score = visibility deadline ms
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] bucket    ms      due bucket width
-- ARGV[3] id        string  job id
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats',
--               P..'wfd:'..id, and the keys of the packed, cold and plain forms that
--               thaw_job changes (include forms)
--
-- A scheduled workflow's definition (type '@workflow') takes its instances' hash
-- P..'wfd:'..id with it when that holds no instance (one written before such a hash was
-- deleted empty). One that holds running or buffered instances stays for them: they go
-- on, and the last one's end deletes it (include workflow's wf_finished).
--
-- Returns: { code, running }
--   code     1 deleted, -1 no such job
--   running  members of runs that were in flight and must be interrupted
--- @include "forms"

local bucketsKey, deadKey, inflightKey = KEYS[1], KEYS[2], KEYS[3]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local id = ARGV[3]

local jobKey = P .. 'job:' .. id
-- A packed or cold job becomes a job hash first (forms' thaw_job): its runs are then
-- filed where a job hash's are.
if redis.call('EXISTS', jobKey) == 0 then
  thaw_job(P, bucketsKey, bucketMs, id)
end
local j = redis.call('HMGET', jobKey, 'st', 'nx', 'rl', 'q', 't')
if not j[1] then
  return { -1, {} }
end
local q = j[4]

-- The scheduled run (a one-time job's, or a recurring job's next occurrence).
local nx = tonumber(j[2]) or 0
if nx > 0 then
  unfile_due(P, bucketsKey, bucketMs, id .. ':' .. j[2], nx, q)
end

-- The active runs: in flight, ready (with or without a run field yet), waiting for a
-- retry or a snooze, or parked.
local running = {}
for due in string.gmatch(j[3] or '', '[^,]+') do
  local member = id .. ':' .. due
  local r = run_get(redis.call('HGET', jobKey, 'r' .. due))
  if r.tok ~= '' then
    if redis.call('ZREM', inflightKey, member) == 1 then
      stat('f', q, -1)
    end
    running[#running + 1] = member
  else
    redis.call('ZREM', P .. 'ready:' .. field(q, 'default'), member)
    if r.st == 'retrying' then
      unfile_due(P, bucketsKey, bucketMs, member, tonumber(r.ra), q)
    end
  end
end

-- Dead runs.
local all = redis.call('HGETALL', jobKey)
for k = 1, #all, 2 do
  local f = all[k]
  if string.find(f, '^r%d') and run_get(all[k + 1]).st == 'dead' then
    if redis.call('ZREM', deadKey, id .. ':' .. string.sub(f, 2)) == 1 then
      stat('d', q, -1)
    end
  end
end

redis.call('DEL', jobKey)
if j[5] == '@workflow' then
  local dk = P .. 'wfd:' .. id
  local d = redis.call('HMGET', dk, 'act', 'bf')
  if not runs_active(d[1]) and (d[2] or '') == '' then
    redis.call('DEL', dk)
  end
end
flush_stats(P)
return { 1, running }
