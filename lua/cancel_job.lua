-- cancel_job: cancel a job: no further occurrences; ready, waiting and buffered runs are
-- removed; running runs are marked cancelled (their workers learn it from the cancel
-- signal or their next heartbeat, and their ack then ends them as cancelled); a
-- recurring job's dead runs leave the dead-letter set (the job expires after retention).
-- Idempotent: cancelling a job in a final state changes nothing.
--
-- KEYS[1] buckets    ZSET  index of non-empty due buckets
-- KEYS[2] dead       ZSET  dead-letter set
-- ARGV[1] prefix     string  shard key prefix
-- ARGV[2] bucket     ms      due bucket width
-- ARGV[3] id         string  job id
-- ARGV[4] keep       count   history entries kept per job
-- ARGV[5] retention  ms      how long a cancelled job is kept
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats', and
--               the keys of the packed, cold and plain forms that thaw_job changes
--               (include forms)
--
-- A workflow's node (an id with '@') that is cancelled ends cancelled in its workflow,
-- which moves its children (include workflow): a child it releases is made ready.
--
-- Returns: { code, state, running, queues }
--   code 1 cancelled now, 0 already in a final state (state says which), -1 no such job
--   running  members of runs that were running and must be interrupted
--   queues   queues that received ready runs (a released child)
--- @include "cancel"
--- @include "workflow"

local bucketsKey, deadKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local id = ARGV[3]
local keep = tonumber(ARGV[4])
local retention = tonumber(ARGV[5])

local code, st, running, att = cancel_one(P, bucketsKey, deadKey, bucketMs, id, keep, retention)
if code == 1 and string.find(id, '@', 1, true) then
  local now, _, nowStr = now_ms()
  wf_node_end(P, id, 'cancelled', nil, att > 0 and att or nil, now, nowStr, keep, retention)
end
local readied = flush_ready(P)
flush_stats(P)
return { code, st, running, readied }
