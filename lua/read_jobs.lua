-- read_jobs: read whole jobs of one shard for a snapshot: each job's hash and expiry time,
-- all in one atomic step, so every job read is self-consistent. A job's runs need no
-- reading of their own: where each run is filed (due bucket, ready set, inflight set,
-- dead-letter set) follows from the job's hash, which the other scripts keep in step with
-- those sets (restore_jobs rebuilds them from it).
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets; only routes the call to the
--                          shard's slot (not read)
-- ARGV[1] prefix   string  shard key prefix `<ns>:v2:{<tag>}:`
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] nodes    '1' | '0'  '1' leaves out the jobs of workflow nodes whose workflow
--                          exists (see below), '0' reads every job
-- ARGV[4] id       string  a job id; more ids may follow (ARGV[5], ...)
--
-- Derived keys: P..'job:'..id, and the keys of the packed and cold forms: a packed or
--               cold job is read as the hash it will have when thawed (forms' job_fields);
--               P..'wf:'..wf for a node's job id wf..'@'..node
--
-- With nodes '1', a workflow node's job (an id with '@') whose workflow exists is left
-- out: a snapshot reads it with its workflow, in the same step (read_workflows), so that
-- the two agree.
--
-- Returns: per job that exists, 3 entries: id, expiry time (ms since the epoch, -1 none),
--          fields (HGETALL: field, value, ...). Jobs gone since their ids were listed are
--          left out.
--- @include "forms"

local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local skipNodes = ARGV[3] == '1'
local now = now_ms()

local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local wf = skipNodes and string.match(id, '^(.+)@[^@]+$')
  local f, exp
  if not wf or redis.call('EXISTS', P .. 'wf:' .. wf) == 0 then
    f, exp = job_fields(P, id, bucketMs, now)
  end
  if f then
    out[#out + 1] = id
    out[#out + 1] = exp
    out[#out + 1] = f
  end
end
return out
