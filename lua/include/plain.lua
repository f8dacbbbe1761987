-- plain: plain runs, the scheduled runs of packed jobs (include packed). create_jobs files
-- them in a sorted set of their shard per priority and queue instead of a due bucket,
-- scored by due time (ms) as in a bucket. fire_due makes them ready without reading their
-- jobs: a member of such a set is always a plain run, so its queue and ready score follow
-- from the set's name and the member. Whatever makes the job something else moves the run
-- to its due bucket first (plain_thaw, from packed_thaw). A set per priority and queue
-- rather than per bucket: packed jobs are due within the store's ColdAfter (later ones
-- are cold), and a set is read from its start, like a bucket.
--   P..'plain:'..pri..':'..q  ZSET  member id..':'..due of a plain run of priority pri
--                                   (one digit) and queue q; score = due ms
--   P..'plain:index'          ZSET  member pri..':'..q of a plain set; score = at most
--                                   the due time of its first run: create_jobs lowers it
--                                   to the runs it files (ZADD LT), fire_due sets it to
--                                   the set's first after taking runs, or drops the name
--                                   of an emptied set. plain_thaw's removals may leave it
--                                   lower than that (fire_due then visits the set for
--                                   nothing and corrects it), never higher: a dispatcher
--                                   that sleeps until the index's first wakes in time.
-- A plain run has no fields of its own: its job's fields are the packed job's, found and
-- read through the packed include.
--- @include "common"
--- @include "hash"

local PLAIN, PLAIN_INDEX = 'plain:', 'plain:index'

-- plain_set returns the name (pri..':'..q) of the plain set of a priority and queue as
-- stored ('' for the default).
local function plain_set(pri, q)
  return field(pri, '5') .. ':' .. field(q, 'default')
end

-- plain_run_key returns the key of the plain set that holds the scheduled runs of packed
-- jobs of priority pri and queue q.
local function plain_run_key(P, pri, q)
  return P .. PLAIN .. plain_set(pri, q)
end

-- plain_thaw moves member, due at dueStr, from plain set key (plain_run_key) to its due
-- bucket (bucket index bucketsKey, width bucketMs), where a job hash's scheduled run
-- lives. Returns true when it was there. The shard's counts are unchanged: both are
-- scheduled.
local function plain_thaw(P, bucketsKey, bucketMs, key, member, dueStr)
  if redis.call('ZREM', key, member) == 0 then
    return false
  end
  local due = tonumber(dueStr)
  redis.call('ZADD', hash_run_key(P, bucketMs, due), dueStr, member)
  redis.call('ZADD', bucketsKey, num(math.floor(due / bucketMs) * bucketMs), num(math.floor(due / bucketMs)))
  return true
end

-- Plain runs that create_jobs files are collected per set by plain_add and written by
-- plain_flush: score, member, ... per set name, the least due time per set, and the
-- priority, queue and list of the last run added (most runs of a call share them).
local plainAdds, plainSets, plainLeast, lastPri, lastQ, lastSet, lastPlain

-- plain_add files member, due at due (ms; dueStr as a string), as a plain run of priority
-- pri and queue q (as sent).
local function plain_add(pri, q, due, dueStr, member)
  if not plainAdds then
    plainAdds, plainSets, plainLeast = {}, {}, {}
  end
  if pri ~= lastPri or q ~= lastQ or not lastPlain then
    lastPri, lastQ, lastSet = pri, q, plain_set(pri, q)
    lastPlain = group(plainAdds, plainSets, lastSet)
  end
  local least = plainLeast[lastSet]
  if not least or due < least then
    plainLeast[lastSet] = due
  end
  local k = #lastPlain
  lastPlain[k + 1], lastPlain[k + 2] = dueStr, member
end

-- plain_flush writes the runs plain_add collected and lowers the index to the least due
-- time filed in each set.
local function plain_flush(P)
  if not plainSets then
    return
  end
  local index = {}
  for _, name in ipairs(plainSets) do
    local adds = plainAdds[name]
    for k = 1, #adds, 6000 do
      redis.call('ZADD', P .. PLAIN .. name, unpack(adds, k, math.min(k + 5999, #adds)))
    end
    index[#index + 1], index[#index + 2] = num(plainLeast[name]), name
  end
  redis.call('ZADD', P .. PLAIN_INDEX, 'LT', unpack(index))
end

-- plain_fire makes ready the plain runs due up to horizonStr (ms), at most limit: each in
-- its set's queue at its priority, from their names alone (common's ready_list, counted
-- as no longer scheduled). They are a set's first by rank, removed by rank. The sets
-- that may hold such runs are those the index puts at or before the horizon; each one
-- visited gets its first run's time in the index, or leaves it when emptied. Returns how
-- many it made ready.
local function plain_fire(P, horizonStr, limit)
  local indexKey = P .. PLAIN_INDEX
  local fired = 0
  local match, sub = string.match, string.sub
  for _, name in ipairs(redis.call('ZRANGEBYSCORE', indexKey, '-inf', horizonStr)) do
    if fired >= limit then
      break
    end
    local key = P .. PLAIN .. name
    local plain = redis.call('ZRANGEBYSCORE', key, '-inf', horizonStr, 'LIMIT', '0', num(limit - fired))
    local np = #plain
    if np > 0 then
      local pri, q = sub(name, 1, 1), sub(name, 3)
      local digit = PRI_DIGIT[pri]
      local adds = ready_list(q)
      local a = #adds
      for k = 1, np do
        local member = plain[k]
        local d = match(member, '^[^:]*:(.*)$')
        -- ready_score_str, inlined for the common 13-digit due time.
        adds[a + 1], adds[a + 2] = #d == 13 and digit .. d or ready_score_str(pri, d), member
        a = a + 2
      end
      redis.call('ZREMRANGEBYRANK', key, '0', num(np - 1))
      stat('s', q, -np)
      fired = fired + np
    end
    local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
    if first[2] then
      redis.call('ZADD', indexKey, first[2], name)
    else
      redis.call('ZREM', indexKey, name)
    end
  end
  return fired
end

-- plain_earliest returns the index's first score (ms; nil when there are no plain runs):
-- no later than the earliest plain run.
local function plain_earliest(P)
  local first = redis.call('ZRANGE', P .. PLAIN_INDEX, '0', '0', 'WITHSCORES')
  return first[2] and tonumber(first[2])
end

-- plain_reset empties plain_add's collections (create_jobs calls it first:
-- a function library's helpers outlive a call, and a call that failed may have left some).
local function plain_reset()
  plainAdds, plainSets, plainLeast, lastPri, lastQ, lastSet, lastPlain = nil, nil, nil, nil, nil, nil, nil
end
