-- create_jobs: store new jobs of one shard and file their first runs.
--
-- KEYS[1] buckets  ZSET  index of non-empty due buckets
-- ARGV[1] prefix   string  shard key prefix `<ns>:v1:{<tag>}:`
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] n        count   jobs that follow
-- then per job:
--   id       string  job id (the idempotency key)
--   kind     'at' | 'delay' | 'cron'
--   when     at: due ms; delay: ms after now; cron: "from,c1,c2,..." in ascending ms:
--            every occurrence after `from`; the first one after now is used
--   ndef     count   field/value pairs of the definition that follow
--   ndef*2   field, value ...
--
-- Derived keys: P..'job:'..id, P..'run:'..id..':'..due, P..'due:'..bucket, P..'ready:'..queue
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

local now = now_ms()

-- The shard's earliest due time before this call, to decide whether to wake the dispatcher.
local earliest = nil
local firstBucket = redis.call('ZRANGE', bucketsKey, 0, 0)
if firstBucket[1] then
  local first = redis.call('ZRANGE', P .. 'due:' .. firstBucket[1], 0, 0, 'WITHSCORES')
  if first[2] then
    earliest = tonumber(first[2])
  end
end

local wake = -1
local queues, seen = {}, {}
local results = {}
local i = 4
for _ = 1, n do
  local id, kind, when, ndef = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local defStart = i + 4
  i = defStart + ndef * 2
  local jobKey = P .. 'job:' .. id
  local existing = redis.call('HMGET', jobKey, 'st', 'nx', 'dh')
  if existing[1] then
    table.insert(results, 0)
    table.insert(results, existing[1])
    table.insert(results, tonumber(existing[2]) or 0)
    table.insert(results, existing[3] or '')
  else
    local due
    if kind == 'at' then
      due = tonumber(when)
    elseif kind == 'delay' then
      due = now + tonumber(when)
    else
      local c = candidate(when, now)
      if c then
        due = tonumber(c)
      end
    end
    if not due then
      table.insert(results, -4)
      table.insert(results, '')
      table.insert(results, 0)
      table.insert(results, '')
    else
      local def = {}
      local q, pri, dh = 'default', 5, ''
      for k = defStart, defStart + ndef * 2 - 1, 2 do
        local f, v = ARGV[k], ARGV[k + 1]
        table.insert(def, f)
        table.insert(def, v)
        if f == 'q' then q = v elseif f == 'pr' then pri = v elseif f == 'dh' then dh = v end
      end
      redis.call('HSET', jobKey, 'cr', now, unpack(def))
      local dueStr = num(due)
      local state, next
      if kind ~= 'cron' and due <= now then
        -- Due already: its run goes straight to the ready set.
        state, next = 'ready', 0
        new_run(P, jobKey, id, dueStr, q, pri, state)
        if not seen[q] then
          seen[q] = true
          table.insert(queues, q)
        end
      else
        state, next = 'scheduled', due
        file_due(P, bucketsKey, bucketMs, id .. ':' .. dueStr, due)
        if (not earliest or due < earliest) and (wake == -1 or due < wake) then
          wake = due
        end
      end
      redis.call('HSET', jobKey, 'st', state, 'nx', num(next))
      table.insert(results, 1)
      table.insert(results, state)
      table.insert(results, next)
      table.insert(results, dh)
    end
  end
end

return { wake, queues, results }
