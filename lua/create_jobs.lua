-- create_jobs: store new jobs of one shard and file their first runs.
--
-- KEYS[1] buckets  ZSET  index of non-empty due buckets
-- ARGV[1] prefix   string  shard key prefix `<ns>:v2:{<tag>}:`
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] n        count   jobs that follow
-- ARGV[4] cold     ms      a one-time job due more than this after now is stored cold
--                          (include cold), 0 never
-- ARGV[5] pack     '1' | '0'  whether a one-time job (not cold) is stored packed
--                          (include packed, its run a plain run) rather than as a job hash
-- then per job:
--   id       string  job id (the idempotency key)
--   kind     'at' | 'delay' | 'cron'
--   when     at: due ms; delay: ms after now; cron: "from,c1,c2,..." in ascending ms:
--            every occurrence after `from`; the first one after now is used
--   queue    string  the job's queue
--   priority 0-9
--   dh       string  definition hash (stored as field 'dh'; compared by the caller)
--   ndef     count   field/value pairs of the definition that follow (fields left out
--                    take their defaults, see common's `field` callers)
--   ndef*2   field, value ...
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats', and
--               the keys of the packed, cold and plain forms (their includes)
--
-- A job whose first run is due at or before now goes straight to the ready set.
-- A scheduled workflow's definition (a cron job of type '@workflow') whose id a workflow
-- has (P..'wf:'..id) is refused: status -6.
--
-- Returns: { wake, queues, results }
--   wake     earliest new due time when it is earlier than every run the shard held
--            before (the dispatcher must be woken), else -1
--   queues   queues that received ready runs
--   results  per job, 4 entries: status, state, next due ms (0 none), definition hash
--            status 1 created, 0 the id existed (state etc. are the existing job's),
--            -4 no cron candidate after the server's now (clock skew: retry with fresh times)
--- @include "forms"

local bucketsKey = KEYS[1]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local coldMs = tonumber(ARGV[4])
local pack = ARGV[5] == '1'

local now, _, nowStr = now_ms()
-- The forms' collections of new jobs, which outlive a call of a function library.
plain_reset()
cold_reset()
packed_reset()

-- The shard's earliest due time before this call, to decide whether to wake the
-- dispatcher (forms' shard_earliest).
local earliest = shard_earliest(P, bucketsKey)

local wake = -1
local results = {}
local nr = 0
local dueAdds, dueBuckets = {}, {}
-- The bucket of the last job filed, as numbers and as its name: jobs of a batch often
-- share a bucket, and formatting a number costs more than filing the job.
local lastLo, lastHi, lastB
-- The jobs of this call by id (where their results start, which hold state, due and dh
-- as the HMGET of an existing job does): an id given twice in a call is found by the
-- second, before the new packed and cold jobs are written and though the ids' EXISTS
-- (anyHash) was asked before the first made or thawed its job hash.
local newJobs = {}
-- Whether the shard may hold cold jobs, which an id must then be looked up among; and
-- which ids are packed jobs already, looked up at once.
local anyCold = cold_any(P)
local packedIDs = {}
local ids, jobKeys, ndefs, k = {}, {}, {}, 6
for c = 1, n do
  local ndef = tonumber(ARGV[k + 6])
  ids[c], jobKeys[c], ndefs[c] = ARGV[k], P .. 'job:' .. ARGV[k], ndef
  k = k + 7 + ndef * 2
end
if packed_any(P) then
  for c, v in ipairs(packed_values(P, ids)) do
    if v then
      packedIDs[ids[c]] = true
    end
  end
end
-- Whether any of the ids has a job hash, asked once: a new id (the common case) then
-- costs no call of its own.
local anyHash = false
for c = 1, n, 4000 do
  if redis.call('EXISTS', unpack(jobKeys, c, math.min(c + 3999, n))) > 0 then
    anyHash = true
    break
  end
end
local i = 6
for c = 1, n do
  local id, kind, when, q, pri, dh = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local ndef = ndefs[c]
  local defStart = i + 7
  local defEnd = defStart + ndef * 2 - 1
  i = defEnd + 1
  local jobKey = jobKeys[c]
  -- EXISTS first: a new id costs less than reading three fields.
  local existing
  local at = newJobs[id]
  if at then
    existing = { results[at + 2], results[at + 3], results[at + 4] }
  elseif (anyHash and redis.call('EXISTS', jobKey) == 1 or packedIDs[id] and packed_thaw(P, id, bucketsKey, bucketMs) or
      anyCold and cold_thaw(P, id, bucketsKey, bucketMs)) then
    existing = redis.call('HMGET', jobKey, 'st', 'nx', 'dh')
  end
  if existing and existing[1] then
    results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = 0, existing[1], tonumber(existing[2]) or 0, existing[3] or ''
  elseif kind == 'cron' and def_of('t', ARGV, defStart, defEnd) == '@workflow' and
      redis.call('EXISTS', P .. 'wf:' .. id) == 1 then
    -- A scheduled workflow's definition whose id a workflow (without a schedule) has:
    -- one id names one workflow (create_workflow refuses the other way round).
    results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = -6, '', 0, ''
  else
    local due = due_of(kind, when, now)
    if not due then
      results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = -4, '', 0, ''
    else
      -- An 'at' time comes as the integer string it is (the caller formats it).
      local dueStr = kind == 'at' and when or num(due)
      local state, next, nextStr, rl
      -- A one-time job is packed unless its priority is no digit (the API refuses it):
      -- fire_due turns a plain set's name into a ready score, which needs a digit.
      local packIt = pack and kind ~= 'cron' and (pri == '' or PRI_DIGIT[pri])
      local scheduled = kind == 'cron' or due > now
      if scheduled and (not lastLo or due < lastLo or due >= lastHi) then
        local bn = math.floor(due / bucketMs)
        lastLo, lastHi, lastB = bn * bucketMs, (bn + 1) * bucketMs, num(bn)
      end
      if kind ~= 'cron' and coldMs > 0 and due > now + coldMs then
        -- Due far ahead: packed until the dispatcher thaws its bucket (fire_due).
        stat('s', q, 1)
        cold_add(P, id, due, dueStr, lastB, lastLo, now, dh, ARGV, defStart, defEnd)
        results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = 1, 'scheduled', due, dh
      elseif not scheduled then
        -- Due already: its run goes straight to the ready set.
        state, next, nextStr, rl = 'ready', 0, '0', ',' .. dueStr .. ','
        new_run(id, dueStr, q, pri)
      else
        state, next, nextStr, rl = 'scheduled', due, dueStr, ','
        stat('s', q, 1)
        -- A packed job's run is a plain run; any other goes to its due bucket.
        if packIt then
          plain_add(pri, q, due, dueStr, id .. ':' .. dueStr)
        else
          local adds = group(dueAdds, dueBuckets, lastB)
          local k = #adds
          adds[k + 1], adds[k + 2] = dueStr, id .. ':' .. dueStr
        end
        if (not earliest or due < earliest) and (wake == -1 or due < wake) then
          wake = due
        end
      end
      if state and packIt then
        -- A one-time job is packed; its run is ready, or a plain run (above).
        packed_add(id, nowStr, q, pri, due, dueStr, dh, ARGV, defStart, defEnd)
        results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = 1, state, next, dh
      elseif state then
        if ndef > 0 then
          redis.call('HSET', jobKey, 'st', state, 'nx', nextStr, 'cr', nowStr, 'dh', dh, 'rl', rl, unpack(ARGV, defStart, defEnd))
        else
          redis.call('HSET', jobKey, 'st', state, 'nx', nextStr, 'cr', nowStr, 'dh', dh, 'rl', rl)
        end
        results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = 1, state, next, dh
      end
    end
  end
  -- A later entry of the same id in this call reads these results (status 0 or 1).
  if results[nr + 1] ~= -4 then
    newJobs[id] = nr
  end
  nr = nr + 4
end

for _, b in ipairs(dueBuckets) do
  local adds = dueAdds[b]
  for k = 1, #adds, 6000 do
    redis.call('ZADD', P .. 'due:' .. b, unpack(adds, k, math.min(k + 5999, #adds)))
  end
  redis.call('ZADD', bucketsKey, num(tonumber(b) * bucketMs), b)
end

plain_flush(P)
cold_flush(P, bucketMs)
packed_flush(P)

local readied = flush_ready(P)
flush_stats(P)
return { wake, readied, results }
