-- read_workflows: read whole workflows of one shard for a snapshot: each workflow's hash
-- and expiry time with the jobs of all its nodes (as read_jobs reads a job), in one
-- atomic step, so that a workflow and its nodes agree (read_jobs leaves those jobs out).
-- A scheduled workflow's definition hash (P..'wfd:'..def) is not read: restore_workflows
-- rebuilds it from the instances it restores.
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets; only routes the call to the
--                          shard's slot (not read)
-- ARGV[1] prefix   string  shard key prefix `<ns>:v2:{<tag>}:`
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] budget   count   stop before the next workflow once this many nodes were read
--                          (at least one workflow is read)
-- ARGV[4] id       string  a workflow id; more ids may follow (ARGV[5], ...)
--
-- Derived keys: P..'wf:'..id, P..'job:'..id..'@'..node, and the keys of the packed and
--               cold forms (forms' job_fields)
--
-- Returns: { consumed, workflow, ... }
--   consumed  how many of the ids were handled (the caller asks again for the rest)
--   workflow  { id, expiry time (ms since the epoch, -1 none), fields (HGETALL),
--               nodes: per node job that exists, id, expiry time, fields }
--             per workflow that exists; those gone since their ids were listed are
--             left out
--- @include "forms"

local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local now = now_ms()

local out = { 0 }
local read = 0
local consumed = 0
for i = 4, #ARGV do
  if consumed > 0 and read >= budget then
    break
  end
  consumed = consumed + 1
  local wf = ARGV[i]
  local wk = P .. 'wf:' .. wf
  local f = redis.call('HGETALL', wk)
  if #f > 0 then
    local nodes = {}
    local list = ''
    for k = 1, #f, 2 do
      if f[k] == 'nodes' then
        list = f[k + 1]
        break
      end
    end
    for node in string.gmatch(list, '[^,]+') do
      local id = wf .. '@' .. node
      local jf, exp = job_fields(P, id, bucketMs, now)
      read = read + 1
      if jf then
        nodes[#nodes + 1] = id
        nodes[#nodes + 1] = exp
        nodes[#nodes + 1] = jf
      end
    end
    out[#out + 1] = { wf, redis.call('PEXPIRETIME', wk), f, nodes }
  end
end
out[1] = consumed
return out
