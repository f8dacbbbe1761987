-- create_jobs: store new jobs of one shard and file their first runs.
--
-- KEYS[1] buckets  ZSET  index of non-empty due buckets
-- ARGV[1] prefix   string  shard key prefix `<ns>:v1:{<tag>}:`
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] n        count   jobs that follow
-- ARGV[4] cold     ms      a one-time job due more than this after now is stored cold
--                          (see common's cold_record), 0 never
-- ARGV[5] pack     '1' | '0'  whether a one-time job (not cold) is stored packed
--                          (common's PACKED) rather than as a job hash
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
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats',
--               P..'cold', P..'pack:'..bucket, P..'jobs:'..slot, P..'jobs:packed',
--               P..'runs:packed', P..'plain:'..pri..':'..queue, P..'plains'
--
-- A job whose first run is due at or before now goes straight to the ready set.
--
-- Returns: { wake, queues, results }
--   wake     earliest new due time when it is earlier than every run the shard held
--            before (the dispatcher must be woken), else -1
--   queues   queues that received ready runs
--   results  per job, 4 entries: status, state, next due ms (0 none), definition hash
--            status 1 created, 0 the id existed (state etc. are the existing job's),
--            -4 no cron candidate after the server's now (clock skew: retry with fresh times)
--- @include "common"

local bucketsKey = KEYS[1]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local coldMs = tonumber(ARGV[4])
local pack = ARGV[5] == '1'

local now, _, nowStr = now_ms()

-- The shard's earliest due time before this call, to decide whether to wake the
-- dispatcher (common's shard_earliest).
local earliest = shard_earliest(P, bucketsKey)

local wake = -1
local results = {}
local nr = 0
local dueAdds, dueBuckets = {}, {}
-- Plain runs (common's PLAIN) per plain set: score, member, ...; the least due time
-- per set; and the priority, queue, set and list of the last one filed.
local plainAdds, plainSets, plainLeast = {}, {}, {}
local lastPri, lastQ, lastSet, lastPlain
-- The bucket of the last job filed, as numbers and as its name: jobs of a batch often
-- share a bucket, and formatting a number costs more than filing the job.
local lastLo, lastHi, lastB
-- Cold records per bucket, and the jobs of this call by id (where their results start,
-- which hold state, due and dh as the HMGET of an existing job does): an id given twice
-- in a call is found by the second, before the records are written and though the
-- ids' EXISTS (anyHash) was asked before the first made or unpacked its job hash.
local packAdds, packBuckets, newJobs = {}, {}, {}
-- Packed jobs of this call: id, value, ... (common's PACKED). Both hashes are hash tables
-- from their first write on (as_table); a run state is written first by a claim.
local packed = { as_table() }
-- Whether the shard may hold cold jobs, which an id must then be looked up among; and
-- which ids are packed jobs already, looked up at once.
local anyCold = redis.call('EXISTS', P .. 'cold') == 1
local packedIDs = {}
local ids, jobKeys, ndefs, k = {}, {}, {}, 6
for c = 1, n do
  local ndef = tonumber(ARGV[k + 6])
  ids[c], jobKeys[c], ndefs[c] = ARGV[k], P .. 'job:' .. ARGV[k], ndef
  k = k + 7 + ndef * 2
end
if redis.call('EXISTS', P .. PACKED) == 1 then
  for c, v in ipairs(redis.call('HMGET', P .. PACKED, unpack(ids))) do
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
  elseif (anyHash and redis.call('EXISTS', jobKey) == 1 or packedIDs[id] and unpack_job(P, id, bucketsKey, bucketMs) or
      anyCold and thaw_cold(P, bucketsKey, bucketMs, id)) then
    existing = redis.call('HMGET', jobKey, 'st', 'nx', 'dh')
  end
  if existing and existing[1] then
    results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = 0, existing[1], tonumber(existing[2]) or 0, existing[3] or ''
  else
    local due = due_of(kind, when, now)
    if not due then
      results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = -4, '', 0, ''
    else
      -- An 'at' time comes as the integer string it is (the caller formats it).
      local dueStr = kind == 'at' and when or num(due)
      local state, next, nextStr, rl
      local scheduled = kind == 'cron' or due > now
      if scheduled and (not lastLo or due < lastLo or due >= lastHi) then
        local bn = math.floor(due / bucketMs)
        lastLo, lastHi, lastB = bn * bucketMs, (bn + 1) * bucketMs, num(bn)
      end
      if kind ~= 'cron' and coldMs > 0 and due > now + coldMs then
        -- Due far ahead: packed until the dispatcher thaws its bucket (fire_due).
        stat('s', q, 1)
        local recs = group(packAdds, packBuckets, lastB)
        recs[#recs + 1] = cold_record(id, due, dueStr, lastLo, now, dh, ARGV, defStart, defEnd)
        redis.call('HSET', cold_index(P, id), id, lastB)
        results[nr + 1], results[nr + 2], results[nr + 3], results[nr + 4] = 1, 'scheduled', due, dh
      elseif not scheduled then
        -- Due already: its run goes straight to the ready set.
        state, next, nextStr, rl = 'ready', 0, '0', ',' .. dueStr .. ','
        new_run(id, dueStr, q, pri)
      else
        state, next, nextStr, rl = 'scheduled', due, dueStr, ','
        stat('s', q, 1)
        -- A packed job's run is a plain run (common's PLAIN); any other goes to its due
        -- bucket, as would one whose priority is no digit (the API refuses it), whose
        -- set's name fire_due could not turn into a ready score.
        local adds
        if pack and kind ~= 'cron' and (pri == '' or PRI_DIGIT[pri]) then
          -- Most jobs of a call share a queue and priority: the list of the last is kept.
          if pri ~= lastPri or q ~= lastQ then
            lastPri, lastQ, lastSet = pri, q, plain_set(pri, q)
            lastPlain = group(plainAdds, plainSets, lastSet)
          end
          adds = lastPlain
          local least = plainLeast[lastSet]
          if not least or due < least then
            plainLeast[lastSet] = due
          end
        else
          adds = group(dueAdds, dueBuckets, lastB)
        end
        local k = #adds
        adds[k + 1], adds[k + 2] = dueStr, id .. ':' .. dueStr
        if (not earliest or due < earliest) and (wake == -1 or due < wake) then
          wake = due
        end
      end
      if state and pack and kind ~= 'cron' then
        -- A one-time job is packed (common's PACKED), its run filed as a job hash's is.
        local k = #packed
        packed[k + 1], packed[k + 2] = id, nowStr .. '|' .. (def_of('vt', ARGV, defStart, defEnd) or '') .. '|' .. q .. '|' .. pri .. '|' ..
          cold_record(id, due, dueStr, 0, due, dh, ARGV, defStart, defEnd)
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

-- The plain sets' index is lowered to the least due time filed in each.
local index = {}
for _, name in ipairs(plainSets) do
  local adds = plainAdds[name]
  for k = 1, #adds, 6000 do
    redis.call('ZADD', P .. PLAIN .. name, unpack(adds, k, math.min(k + 5999, #adds)))
  end
  index[#index + 1], index[#index + 2] = num(plainLeast[name]), name
end
if #index > 0 then
  redis.call('ZADD', P .. PLAINS, 'LT', unpack(index))
end

for _, b in ipairs(packBuckets) do
  local recs = packAdds[b]
  for k = 1, #recs, 6000 do
    redis.call('RPUSH', P .. 'pack:' .. b, unpack(recs, k, math.min(k + 5999, #recs)))
  end
  redis.call('ZADD', P .. 'cold', num(tonumber(b) * bucketMs), b)
end

if #packed > 2 then
  for k = 1, #packed, 6000 do
    redis.call('HSET', P .. PACKED, unpack(packed, k, math.min(k + 5999, #packed)))
  end
  redis.call('HSET', P .. PACKED_RUNS, as_table())
end

local readied = flush_ready(P)
flush_stats(P)
return { wake, readied, results }
