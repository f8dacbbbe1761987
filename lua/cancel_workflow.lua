-- cancel_workflow: cancel a running workflow at once: its waiting nodes end cancelled,
-- its released nodes' jobs are cancelled (include cancel: ready runs removed, running
-- ones marked cancelled, their workers told), and the workflow ends cancelled. Nothing
-- is released. Cancelling a workflow that ended changes nothing.
--
-- KEYS[1] buckets    ZSET  index of non-empty due buckets
-- KEYS[2] dead       ZSET  dead-letter set
-- ARGV[1] prefix     string  shard key prefix
-- ARGV[2] bucket     ms      due bucket width
-- ARGV[3] id         string  workflow id
-- ARGV[4] keep       count   history entries kept per job
-- ARGV[5] retention  ms      how long the workflow and its jobs are kept
--
-- Derived keys: P..'wf:'..id, P..'wfd:'..def, P..'job:'..id..'@'..node, and those of
--               cancel_job (with the packed form's: a started buffered instance's roots
--               wait packed and are given their due time as they are released)
--
-- A cancelled scheduled instance leaves its definition's running set: the buffered
-- instance, if any, starts (its roots' runs are made ready).
--
-- Returns: { code, state, running, queues }
--   code 1 cancelled now, 0 it had ended (state says how), -1 no such workflow
--   running  members of runs that were running and must be interrupted
--   queues   queues that received ready runs (a buffered instance that started)
--- @include "cancel"
--- @include "workflow"

local bucketsKey, deadKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local wf = ARGV[3]
local keep = tonumber(ARGV[4])
local retention = tonumber(ARGV[5])

local wk = P .. 'wf:' .. wf
local w = redis.call('HMGET', wk, 'st', 'nodes')
if not w[1] then
  return { -1, '', {}, {} }
end
if w[1] ~= 'running' then
  return { 0, w[1], {}, {} }
end
local now, _, nowStr = now_ms()
redis.call('HSET', wk, 'st', 'cancelled')
-- A held instance cancelled before it started is held no more.
redis.call('HDEL', wk, 'hold')
local running = {}
local ended = 0
for node in string.gmatch(w[2] or '', '[^,]+') do
  local f = 's:' .. node
  local n = wf_get(redis.call('HGET', wk, f))
  if n and (n.st == 'waiting' or n.st == 'released') then
    local id = wf .. '@' .. node
    if n.st == 'waiting' then
      wf_end_job(P, id, 'workflow cancelled', now, keep, retention)
    else
      local _, _, r, att = cancel_one(P, bucketsKey, deadKey, bucketMs, id, keep, retention)
      for _, m in ipairs(r) do
        running[#running + 1] = m
      end
      if att and att > 0 then
        n.att = num(att)
      end
    end
    n.st, n.en = 'cancelled', nowStr
    redis.call('HSET', wk, f, wf_pack(n))
    ended = ended + 1
  end
end
redis.call('HINCRBY', wk, 'bad', ended)
redis.call('HSET', wk, 'left', 0)
wf_finished(P, wk, wf, now, nowStr, retention)
local readied = flush_ready(P)
flush_stats(P)
return { 1, 'cancelled', running, readied }
