-- forms: the seam between the scripts and the storage forms of jobs. A job is stored in
-- one of three forms, each with an include of its own that has the same entry points:
--   <form>_find     find the job in the form
--   <form>_fields   read its fields as the job hash they stand for (HGETALL's form)
--   <form>_thaw     turn it into a job hash (the hash form needs none)
--   <form>_run_key  where its scheduled run lives
--
--   form    include  run while scheduled           made by
--   hash    hash     due bucket                    create_jobs (cron, NoPack), a thaw,
--                                                  restore_jobs
--   packed  packed   plain set (include plain)     create_jobs (one-time, not cold)
--   cold    cold     in its record                 create_jobs (one-time, due after ColdAfter)
--
-- A packed job's scheduled run is a plain run, the fourth form, one of runs; plain has
-- the same entry points for runs but find and fields (a plain run is found and read as
-- its packed job is). Scripts that change a job call thaw_job first and then work on its
-- hash; readers call job_fields. Only the hot paths of packed jobs (create, fire, claim,
-- a succeeded ack) and of cold ones (create, thaw when due) call a form's own helpers,
-- to handle a batch at once. Adding a form: an include with these entry points, its row
-- above, its calls in job_fields and thaw_job (and shard_earliest when it files runs of
-- its own), shard/forms.go and keys.go in Go, and a row of shardtest.Forms.
-- docs/architecture.md draws how a job moves between the forms.
--- @include "common"
--- @include "hash"
--- @include "packed"
--- @include "cold"

-- job_fields returns the fields of job id (HGETALL's form) whatever its form, as the job
-- hash it is or will be when thawed, and its expiry time (ms, -1 none); nil when there is
-- no such job. bucketMs is the shard's due-bucket width.
local function job_fields(P, id, bucketMs, now)
  local f, exp = hash_fields(P, id)
  if f then
    return f, exp
  end
  local v = packed_find(P, id)
  if v then
    -- A packed job whose expiry has passed (not deleted yet) is gone.
    return packed_fields(P, id, v, now)
  end
  local rec, b = cold_find(P, id)
  if rec then
    return cold_fields(rec, b, bucketMs)
  end
  return nil
end

-- thaw_job makes job id a job hash whatever its form, so that a script may change it:
-- a packed or cold job's run is filed as a job hash's is (packed_thaw, cold_thaw).
-- Returns true when it was packed or cold. Costs two HGETs when it was neither.
local function thaw_job(P, bucketsKey, bucketMs, id)
  return packed_thaw(P, id, bucketsKey, bucketMs) or cold_thaw(P, id, bucketsKey, bucketMs)
end

-- shard_earliest returns the earliest due time the shard holds (ms; nil when none): of
-- its due buckets (index bucketsKey) and of its plain runs (plain_earliest, which may be
-- earlier than the runs: the dispatcher then wakes no later than that). A script that
-- files a run earlier than it signals the dispatcher to wake.
local function shard_earliest(P, bucketsKey)
  local earliest = nil
  local firstBucket = redis.call('ZRANGE', bucketsKey, '0', '0')
  if firstBucket[1] then
    local first = redis.call('ZRANGE', P .. 'due:' .. firstBucket[1], '0', '0', 'WITHSCORES')
    if first[2] then
      earliest = tonumber(first[2])
    end
  end
  local plain = plain_earliest(P)
  if plain and (not earliest or plain < earliest) then
    earliest = plain
  end
  return earliest
end
