-- packed: packed jobs. A one-time job that is not cold is kept as one value in a hash of
-- its shard, not as a job hash, for as long as only a fire, a claim and a successful ack
-- touch it: each reads the values of all the runs of its call with one HMGET and writes
-- their states with one HSET, where job hashes cost a read and a write per run. Any
-- other change (cancel, pause, update, trigger, a failed attempt, a hand-back, a reaped
-- or extended run, a create of the same id, a restore) thaws the job into the job hash it
-- stands for (packed_thaw), and from then on it is an ordinary job. While scheduled, its
-- run is a plain run (include plain); once fired, it is in its queue's ready set and
-- then the inflight set, as a job hash's run is.
--   P..'packed:jobs'      HASH  id -> "cr|vt|q|pr|"..record (include record; bucket
--                               start 0, age 0): the time it was created, its
--                               visibility timeout ('' default), queue and priority
--                               (read without walking the record), and its definition.
--                               A workflow's node that waits for its parents has no run
--                               and no due time yet: its record's offset is 'W'
--                               (packed_release gives it its due time)
--   P..'packed:runs'      HASH  id -> its run's state: none while it is scheduled or
--                               ready (its member is in a plain set or in its queue's
--                               ready set: packed_fields tells which),
--                               "R|token|worker|start|queue" while its first attempt
--                               runs, "C|token|worker|start|queue|end|expiry" once it
--                               succeeded (times in ms)
--   both hashes also hold the field '' (as_table)
--   P..'packed:expiry'    ZSET  expiry buckets of succeeded packed jobs; score = bucket end
--   P..'packed:expiry:'..b LIST ids of the packed jobs that expire in bucket b
--                               (packed_expire deletes them once it has passed)
--- @include "common"
--- @include "record"
--- @include "plain"

local PACKED, PACKED_RUNS, PACKED_EXPIRY = 'packed:jobs', 'packed:runs', 'packed:expiry'

-- as_table returns a field no job id can be ('') and a value longer than Redis's
-- hash-max-listpack-value (64 by default), which packed_flush writes to both hashes: a
-- hash with it is a hash table from then on. A small hash would otherwise be a listpack,
-- whose fields are searched one by one, and a claim or an ack looks up many at once. A
-- server configured with values longer than 256 keeps small hashes listpacks: slower,
-- no less correct. Listings skip the field (shard/forms.go). The value is made at the
-- first call: a library's top level cannot reach the string library.
local asTableValue
local function as_table()
  if not asTableValue then
    asTableValue = string.rep('~', 256)
  end
  return '', asTableValue
end

-- packed_find returns packed job id's value, or nil. Costs one HGET.
local function packed_find(P, id)
  return redis.call('HGET', P .. PACKED, id) or nil
end

-- packed_values returns the packed values of job ids (false for a job that is not
-- packed), read at once.
local function packed_values(P, ids)
  if #ids == 0 then
    return {}
  end
  return redis.call('HMGET', P .. PACKED, unpack(ids))
end

-- packed_any reports whether the shard holds packed jobs.
local function packed_any(P)
  return redis.call('EXISTS', P .. PACKED) == 1
end

-- packed_head returns the queue (as stored, '' the default) and priority of packed value v.
local function packed_head(v)
  return string.match(v, '^%d+|%d*|([^|]*)|(%d*)|')
end

-- packed_vt returns the visibility timeout (ms, a string) of packed value v, nil for the
-- default. A value whose bytes 14 and 15 are both '|' (a 13-digit creation time and an
-- empty timeout) has the default: claim_runs reads those two bytes inline and calls this
-- only for the others.
local function packed_vt(v)
  return string.match(v, '^%d+|(%d+)|')
end

-- packed_state returns the fields (HGETALL's form) of the job hash that packed job id of
-- value v, with run state run (nil or false while scheduled or ready), stands for, its
-- expiry time (ms, -1 none) and its run's due time (the string of its member; nil for a
-- waiting node, which has no run); nil when it has expired.
local function packed_state(P, id, v, run, now)
  local cr, q, rec = string.match(v, '^(%d+)|%d*|([^|]*)|%d*|(.*)$')
  local id_, rest = string.match(rec, '^([^|]*)|W(|.*)$')
  if id_ then
    -- A waiting workflow node: no run, no due time (its record decoded as if due when it
    -- was created, which only sets 'nx', made 0 here).
    local _, _, f = record_decode(id_ .. '|' .. cr .. rest, 0, 1)
    f[2], f[4], f[6] = 'waiting', '0', cr
    return f, -1, nil
  end
  -- Packed with bucket start 0: the offset is the due time. Scheduled as read.
  local _, dueStr, f = record_decode(rec, 0, 1)
  f[6] = cr
  -- Without a run state, its run is ready when fire_due moved it to its ready set.
  if not run and not redis.call('ZSCORE', P .. 'ready:' .. (q == '' and 'default' or q), id .. ':' .. dueStr) then
    return f, -1, dueStr
  end
  f[2], f[4], f[10] = 'ready', '0', ',' .. dueStr .. ','
  if not run then
    return f, -1, dueStr
  end
  local rf = 'r' .. dueStr
  local tok, wk, start = string.match(run, '^R|([^|]*)|([^|]*)|([^|]*)|')
  if tok then
    f[#f + 1], f[#f + 2] = rf, 'running|1|1|' .. tok .. '|' .. wk .. '|' .. start .. '||'
    return f, -1, dueStr
  end
  local wk2, start2, stop, exp = string.match(run, '^C|[^|]*|([^|]*)|([^|]*)|[^|]*|(%d+)|(%d+)$')
  if not exp or tonumber(exp) <= now then
    return nil
  end
  -- As finish_runs' fast path leaves a succeeded one-time job.
  f[2], f[10] = 'completed', ','
  f[#f + 1], f[#f + 2] = rf, 'succeeded|1|1||' .. wk2 .. '|' .. start2 .. '|' .. stop .. '|'
  f[#f + 1], f[#f + 2] = 'hs', dueStr
  return f, tonumber(exp), dueStr
end

-- packed_fields returns the fields (HGETALL's form) of the job hash that packed job id of
-- value v stands for, and its expiry time (ms, -1 none); nil when it has expired.
local function packed_fields(P, id, v, now)
  local f, exp = packed_state(P, id, v, redis.call('HGET', P .. PACKED_RUNS, id), now)
  return f, exp
end

-- packed_run_key returns the key of the plain set that holds the scheduled run of the
-- packed job of value v (while it has not fired).
local function packed_run_key(P, v)
  local q, pri = packed_head(v)
  return plain_run_key(P, pri, q)
end

-- packed_thaw makes packed job id an ordinary one: the job hash it stands for, with the
-- expiry of a succeeded one; its run stays where it is filed (ready or inflight set),
-- except a plain run, which moves to its due bucket (of index bucketsKey and width
-- bucketMs: plain_thaw). A caller whose packed jobs' runs are all in flight (a heartbeat,
-- a worker's outcome) may leave both out. A packed job whose expiry has passed is
-- deleted. Returns true when it was packed (and has not expired). Costs one HGET when it
-- was not.
local function packed_thaw(P, id, bucketsKey, bucketMs)
  local v = redis.call('HGET', P .. PACKED, id)
  if not v then
    return false
  end
  local run = redis.call('HGET', P .. PACKED_RUNS, id)
  -- Decoded before anything is deleted: a script that fails on a value it cannot read
  -- is not rolled back, and must not have lost the job.
  local f, exp, dueStr = packed_state(P, id, v, run, now_ms())
  redis.call('HDEL', P .. PACKED, id)
  if run then
    redis.call('HDEL', P .. PACKED_RUNS, id)
  end
  if not f then
    return false
  end
  local jobKey = P .. 'job:' .. id
  redis.call('HSET', jobKey, unpack(f))
  if exp > 0 then
    redis.call('PEXPIREAT', jobKey, num(exp))
  end
  -- A scheduled run (no run state) may be a plain one: filed as a job hash's is.
  if bucketMs and not run and dueStr then
    plain_thaw(P, bucketsKey, bucketMs, packed_run_key(P, v), id .. ':' .. dueStr, dueStr)
  end
  return true
end

-- Packed jobs that create_jobs stores are collected by packed_add and written by
-- packed_flush: id, value, ...
local packedAdds

-- packed_value is the packed value of job id, created at nowStr and due at due (ms;
-- dueStr as a string), of queue q and priority pri (as sent): the fields between
-- defStart and defEnd of argv are its definition.
local function packed_value(id, nowStr, q, pri, due, dueStr, dh, argv, defStart, defEnd)
  return nowStr .. '|' .. (def_of('vt', argv, defStart, defEnd) or '') .. '|' .. q .. '|' .. pri .. '|' ..
    record_encode(id, due, dueStr, 0, due, dh, argv, defStart, defEnd)
end

-- packed_add stores job id packed (packed_value's arguments), written by packed_flush.
-- The caller files its run (plain_add when scheduled).
local function packed_add(id, nowStr, q, pri, due, dueStr, dh, argv, defStart, defEnd)
  if not packedAdds then
    packedAdds = { as_table() }
  end
  local k = #packedAdds
  packedAdds[k + 1], packedAdds[k + 2] = id, packed_value(id, nowStr, q, pri, due, dueStr, dh, argv, defStart, defEnd)
end

-- packed_release gives the packed workflow nodes ids that wait (packed_add with due
-- 'W') their runs' due time dueStr, in one HMGET and one HSET: a call that ends many
-- workflows' nodes releases their children together (include workflow's
-- wf_release_many). Returns per id its queue and priority (as stored), or false for an
-- id that is not a packed waiting node (it is left unchanged).
local function packed_release(P, ids, dueStr)
  local qs, prs, sets = {}, {}, {}
  local match = string.match
  for k = 1, #ids, 1000 do
    local last = math.min(k + 999, #ids)
    local vs = redis.call('HMGET', P .. PACKED, unpack(ids, k, last))
    for g = 1, #vs do
      local v, i = vs[g], k + g - 1
      local head, q, pri, rest
      if v then
        head, q, pri, rest = match(v, '^(%d+|%d*|([^|]*)|(%d*)|[^|]*|)W(|.*)$')
      end
      if head then
        qs[i], prs[i] = q, pri
        sets[#sets + 1], sets[#sets + 2] = ids[i], head .. dueStr .. rest
      else
        qs[i], prs[i] = false, false
      end
    end
  end
  for k = 1, #sets, 2000 do
    redis.call('HSET', P .. PACKED, unpack(sets, k, math.min(k + 1999, #sets)))
  end
  return qs, prs
end

-- packed_flush writes the jobs packed_add collected. Both hashes are hash tables from
-- their first write on (as_table); a run state is written first by a claim.
local function packed_flush(P)
  if not packedAdds then
    return
  end
  for k = 1, #packedAdds, 6000 do
    redis.call('HSET', P .. PACKED, unpack(packedAdds, k, math.min(k + 5999, #packedAdds)))
  end
  redis.call('HSET', P .. PACKED_RUNS, as_table())
end

-- packed_runs returns the job ids of run members and their packed run states (false for
-- none), read at once.
local function packed_runs(P, members)
  local ids, match = {}, string.match
  for k, m in ipairs(members) do
    ids[k] = match(m, '^([^:]*)')
  end
  if #ids == 0 then
    return ids, {}
  end
  return ids, redis.call('HMGET', P .. PACKED_RUNS, unpack(ids))
end

-- packed_running returns what the run state of a packed job's first attempt, claimed
-- with token tok by worker in queue q, holds before and after its start time (ms): the
-- state is head..start..tail, built by the caller for each run without a call.
local function packed_running(tok, worker, q)
  return 'R|' .. tok .. '|' .. worker .. '|', '|' .. q
end

-- packed_set_runs writes run states: id, state, ...
local function packed_set_runs(P, states)
  redis.call('HSET', P .. PACKED_RUNS, unpack(states))
end

-- packed_held_prefix returns what the state of a run held with token tok starts with
-- (its token is checked by a plain search: no field of a state holds a '|').
local function packed_held_prefix(tok)
  return 'R|' .. tok .. '|'
end

-- packed_in_flight reports whether run state run is that of a run in flight.
local function packed_in_flight(run)
  return string.sub(run, 1, 2) == 'R|'
end

-- packed_run_queue returns the queue of running state run.
local function packed_run_queue(run)
  return string.match(run, '([^|]*)$')
end

-- packed_done records that the packed runs of ids succeeded, given their running states
-- (runs): each becomes C for R with doneSuffix ("|end|expiry") after it. It files the
-- ids to expire together, in the expiry bucket (width bucketMs) after expiry (ms).
local function packed_done(P, ids, runs, doneSuffix, expiry, bucketMs)
  local states, sub = {}, string.sub
  for k = 1, #ids do
    states[2 * k - 1], states[2 * k] = ids[k], 'C' .. sub(runs[k], 2) .. doneSuffix
  end
  redis.call('HSET', P .. PACKED_RUNS, unpack(states))
  local b = num(math.floor(expiry / bucketMs) + 1)
  local len = 0
  for k = 1, #ids, 6000 do
    len = redis.call('RPUSH', P .. PACKED_EXPIRY .. ':' .. b, unpack(ids, k, math.min(k + 5999, #ids)))
  end
  -- A new list (it holds only these ids) enters the index.
  if len == #ids then
    redis.call('ZADD', P .. PACKED_EXPIRY, num(tonumber(b) * bucketMs), b)
  end
end

-- packed_expire deletes succeeded packed jobs whose expiry has passed by now, at most
-- EXPIRE_MAX per call, from the first expiry bucket when it has ended. Returns whether
-- more may be due at once, and else when the next expiry bucket ends (ms; nil when none).
local EXPIRE_MAX = 256
local function packed_expire(P, now)
  local first = redis.call('ZRANGE', P .. PACKED_EXPIRY, '0', '0', 'WITHSCORES')
  local next = first[2] and tonumber(first[2])
  if not next or next > now then
    return false, next
  end
  local eb = first[1]
  local listKey = P .. PACKED_EXPIRY .. ':' .. eb
  local ids = redis.call('LPOP', listKey, num(EXPIRE_MAX))
  if ids then
    local runs = redis.call('HMGET', P .. PACKED_RUNS, unpack(ids))
    local gone = {}
    for k, id in ipairs(ids) do
      -- One thawed since (its job hash expires by itself) has no packed state; one
      -- packed again since, with a later expiry, is left to that expiry's entry.
      local exp = runs[k] and string.match(runs[k], '^C|.*|(%d+)$')
      if exp and tonumber(exp) <= now then
        gone[#gone + 1] = id
      end
    end
    if #gone > 0 then
      redis.call('HDEL', P .. PACKED, unpack(gone))
      redis.call('HDEL', P .. PACKED_RUNS, unpack(gone))
    end
  end
  if redis.call('EXISTS', listKey) == 0 then
    redis.call('ZREM', P .. PACKED_EXPIRY, eb)
  end
  return true
end

-- packed_reset empties packed_add's collection (create_jobs calls it first:
-- a function library's helpers outlive a call, and a call that failed may have left some).
local function packed_reset()
  packedAdds = nil
end
