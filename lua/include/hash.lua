-- hash: the job hash, the form every job can be changed in: every script but the hot
-- paths of packed jobs (fire, claim, succeeded ack) works on this form, and the other
-- forms turn into it (forms' thaw_job) before anything else changes them, so it needs no
-- thaw of its own.
--   P..'job:'..id  HASH  the definition (fields as shard/jobs.go writes them), the state
--                        'st', next due time 'nx', created 'cr', definition hash 'dh',
--                        the active runs 'rl' (",d1,d2,"), one field 'r'..due per run
--                        that has a state (common's run_get), the history 'h' and 'hs'
-- Its scheduled runs live in the due buckets (common's file_due), as do every job's
-- retries and snoozed runs.
--- @include "common"

-- hash_find reports whether job id has a job hash.
local function hash_find(P, id)
  return redis.call('EXISTS', P .. 'job:' .. id) == 1
end

-- hash_fields returns job id's hash (HGETALL's form) and its expiry time (ms, -1 none),
-- or nil when it has none.
local function hash_fields(P, id)
  local key = P .. 'job:' .. id
  local f = redis.call('HGETALL', key)
  if #f == 0 then
    return nil
  end
  return f, redis.call('PEXPIRETIME', key)
end

-- hash_run_key returns the key of the due bucket that holds a job hash's run due at
-- due (ms) when it is scheduled.
local function hash_run_key(P, bucketMs, due)
  return P .. 'due:' .. num(math.floor(due / bucketMs))
end
