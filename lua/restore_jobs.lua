-- restore_jobs: write jobs of one shard from a snapshot (as read_jobs read them) and file
-- their runs again, as the other scripts would have left them, from each job's hash:
--   the next occurrence ('nx') of a job neither paused nor finished  due bucket at 'nx'
--   a run ready for an attempt (no run field yet, or state 'ready')  ready set
--   a run that was in flight ('running')                             ready set again,
--       without using an attempt, as after a worker's hand-back (at-least-once: it may
--       have finished after the snapshot); parked instead when its job is paused
--   a run in flight when its job was cancelled ('cancelled')         dropped
--   a run waiting for a retry ('retrying')                           due bucket at its retry time
--   a dead run ('dead')                                              dead-letter set at its time of death
--   a parked ('paused') or buffered run                              no set, as before
--   a workflow node's job waiting for its parents ('waiting', no run)  no set: it stays
--       waiting (restore_workflows restores a node with its workflow, with this rule)
-- The stats hash counts what is filed, as the other scripts count it (runs made ready
-- count as fired). A job whose id exists is left as it is, so running a restore again
-- adds nothing (idempotent per job); a job whose expiry time has passed is skipped.
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets
-- KEYS[2] dead     ZSET    dead-letter set; score = when the run died (ms)
-- ARGV[1] prefix   string  shard key prefix
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] n        count   jobs that follow
-- then per job:
--   id       string  job id
--   expiry   ms      when the job expires (ms since the epoch), 0 never
--   nfields  count   field/value pairs of its hash that follow
--   nfields*2 field, value ...
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats', and
--               the keys of the packed, cold and plain forms that thaw_job changes
--               (include forms)
--
-- Returns: { restored, existed, expired, wake, queues }
--   restored  jobs written; existed: left alone (the id existed); expired: skipped
--   wake      earliest due time filed (ms), -1 none
--   queues    queues that received ready runs
--- @include "restore"

local bucketsKey, deadKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local n = tonumber(ARGV[3])

local now = now_ms()
local counts = { restored = 0, existed = 0, expired = 0 }
local wake = -1

local i = 4
for _ = 1, n do
  local id, expiry, nfields = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local first = i + 3
  i = first + nfields * 2
  local f = {}
  for k = first, i - 1, 2 do
    f[ARGV[k]] = ARGV[k + 1]
  end
  local what, w = restore_job(P, bucketsKey, deadKey, bucketMs, now, id, expiry, f)
  counts[what] = counts[what] + 1
  if w ~= -1 and (wake == -1 or w < wake) then
    wake = w
  end
end

local readied = flush_ready(P)
flush_stats(P)
return { counts.restored, counts.existed, counts.expired, wake, readied }
