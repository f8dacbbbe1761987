-- cold: cold jobs, one-time jobs due further ahead than the store's ColdAfter when they
-- were created, kept as a record (include record) in a list per due bucket, a fraction of
-- a job hash's memory, until fire_due thaws their bucket (cold_thaw_due) or a script that
-- changes one thaws it (cold_thaw). Their run is in the record: a cold job has no run
-- filed anywhere until it is thawed, and its count as scheduled was made when it was
-- created.
--   P..'cold:buckets'      ZSET  buckets with cold records; score = the bucket's start (ms)
--   P..'cold:'..bucket     LIST  the records of the cold jobs due in the bucket
--   P..'cold:index:'..slot HASH  cold job id -> its bucket; slot = cold_index's, one of
--                                COLD_SLOTS per shard, so that each stays a small listpack
--- @include "common"
--- @include "record"

local COLD_BUCKETS, COLD_LIST, COLD_INDEX = 'cold:buckets', 'cold:', 'cold:index:'
local COLD_SLOTS = 1024

-- cold_index returns the key of the hash that holds cold job id's bucket.
local function cold_index(P, id)
  return P .. COLD_INDEX .. num(tonumber(string.sub(redis.sha1hex(id), 1, 6), 16) % COLD_SLOTS)
end

-- cold_run_key returns the key of the list that holds the records (and so the runs) of
-- the cold jobs due in bucket b (its number, a string).
local function cold_run_key(P, b)
  return P .. COLD_LIST .. b
end

-- cold_find returns cold job id's record and its bucket (a string), or nil. Costs one
-- HGET when the job is not cold.
local function cold_find(P, id)
  local b = redis.call('HGET', cold_index(P, id), id)
  if not b then
    return nil
  end
  local prefix = id .. '|'
  for _, rec in ipairs(redis.call('LRANGE', cold_run_key(P, b), '0', '-1')) do
    if string.sub(rec, 1, #prefix) == prefix then
      return rec, b
    end
  end
  return nil
end

-- cold_fields returns the fields (HGETALL's form) of the job hash that cold record rec
-- of bucket b stands for, and its expiry time (-1: none, a cold job is scheduled).
local function cold_fields(rec, b, bucketMs)
  local _, _, f = record_decode(rec, tonumber(b), bucketMs)
  return f, -1
end

-- cold_thaw makes cold job id a job hash with its due run filed in its due bucket (index
-- bucketsKey, width bucketMs), as create_jobs would have written it. Returns true when it
-- was cold.
local function cold_thaw(P, id, bucketsKey, bucketMs)
  local rec, b = cold_find(P, id)
  if not rec then
    return false
  end
  redis.call('HDEL', cold_index(P, id), id)
  redis.call('LREM', cold_run_key(P, b), '1', rec)
  local bn = tonumber(b)
  local _, dueStr, f = record_decode(rec, bn, bucketMs)
  redis.call('HSET', P .. 'job:' .. id, unpack(f))
  redis.call('ZADD', P .. 'due:' .. b, dueStr, id .. ':' .. dueStr)
  redis.call('ZADD', bucketsKey, num(bn * bucketMs), b)
  return true
end

-- cold_any reports whether the shard may hold cold jobs, among which an id must then be
-- looked up.
local function cold_any(P)
  return redis.call('EXISTS', P .. COLD_BUCKETS) == 1
end

-- Records that create_jobs writes are collected per bucket by cold_add and written by
-- cold_flush.
local coldAdds, coldBuckets

-- cold_add stores job id, due at due (ms; dueStr as a string) in bucket b (its number as
-- a string, starting at bucketStart ms), cold: the fields between defStart and defEnd of
-- argv are its definition (record_encode).
local function cold_add(P, id, due, dueStr, b, bucketStart, now, dh, argv, defStart, defEnd)
  if not coldAdds then
    coldAdds, coldBuckets = {}, {}
  end
  local recs = group(coldAdds, coldBuckets, b)
  recs[#recs + 1] = record_encode(id, due, dueStr, bucketStart, now, dh, argv, defStart, defEnd)
  redis.call('HSET', cold_index(P, id), id, b)
end

-- cold_flush writes the records cold_add collected.
local function cold_flush(P, bucketMs)
  if not coldBuckets then
    return
  end
  for _, b in ipairs(coldBuckets) do
    local recs = coldAdds[b]
    for k = 1, #recs, 6000 do
      redis.call('RPUSH', cold_run_key(P, b), unpack(recs, k, math.min(k + 5999, #recs)))
    end
    redis.call('ZADD', P .. COLD_BUCKETS, num(tonumber(b) * bucketMs), b)
  end
end

-- cold_thaw_due makes job hashes of the cold jobs whose bucket starts up to thawMs after
-- now, filed in their due buckets (index bucketsKey), at most THAW_MAX per call. Returns
-- whether more are to be thawed at once, and else when the next bucket is to be thawed
-- (ms; nil when there are no cold jobs).
local THAW_MAX = 256
local function cold_thaw_due(P, bucketsKey, bucketMs, now, thawMs)
  local bucketsOf = P .. COLD_BUCKETS
  local packs = redis.call('ZRANGEBYSCORE', bucketsOf, '-inf', num(now + thawMs), 'LIMIT', '0', '8')
  local left = THAW_MAX
  for _, b in ipairs(packs) do
    local recs = redis.call('LPOP', cold_run_key(P, b), num(left))
    if recs then
      local bn, members = tonumber(b), {}
      for _, rec in ipairs(recs) do
        local id, dueStr, f = record_decode(rec, bn, bucketMs)
        -- A record whose job left the index (cold_thaw took it) is stale.
        if redis.call('HDEL', cold_index(P, id), id) == 1 then
          redis.call('HSET', P .. 'job:' .. id, unpack(f))
          members[#members + 1] = dueStr
          members[#members + 1] = id .. ':' .. dueStr
        end
      end
      if #members > 0 then
        redis.call('ZADD', P .. 'due:' .. b, unpack(members))
        redis.call('ZADD', bucketsKey, num(bn * bucketMs), b)
      end
      left = left - #recs
    end
    if left <= 0 then
      return true
    end
    -- LPOP took the last record: the list is gone.
    redis.call('ZREM', bucketsOf, b)
  end
  local c = redis.call('ZRANGE', bucketsOf, '0', '0', 'WITHSCORES')
  return false, c[2] and math.max(tonumber(c[2]) - thawMs, now)
end

-- cold_reset empties cold_add's collections (create_jobs calls it first:
-- a function library's helpers outlive a call, and a call that failed may have left some).
local function cold_reset()
  coldAdds, coldBuckets = nil, nil
end
