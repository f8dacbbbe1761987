-- common: helpers shared by the shard scripts. Included with `--- @include "common"`.
--
-- Key layout (P is the shard prefix `<ns>:v1:{<tag>}:`; see shard/keys.go):
--   P..'job:'..id      HASH  job definition and state
--   P..'run:'..member  HASH  one active run; member = id..':'..due_ms
--   P..'due:'..bucket  ZSET  runs due in one bucket; score = when they become ready (ms)
--   P..'ready:'..queue ZSET  ready runs; score = (9-priority)*1e13 + due_ms
--   P..'hist:'..id     LIST  recent runs of a job, newest first, cjson entries

-- now_ms returns the Redis server's clock in milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- num formats an integral number without an exponent.
local function num(x)
  return string.format('%.0f', x)
end

-- split_run splits a run member "<jobID>:<due>" into the job id and the due time string.
local function split_run(member)
  local i = string.find(member, ':[^:]*$')
  return string.sub(member, 1, i - 1), string.sub(member, i + 1)
end

-- file_due puts member into the due bucket of score and records the bucket in the index.
local function file_due(P, bucketsKey, bucketMs, member, score)
  local b = math.floor(score / bucketMs)
  redis.call('ZADD', P .. 'due:' .. num(b), score, member)
  redis.call('ZADD', bucketsKey, b * bucketMs, num(b))
end

-- unfile_due removes member from the due bucket of score; an emptied bucket leaves the index.
-- Returns true when the member was there.
local function unfile_due(P, bucketsKey, bucketMs, member, score)
  local b = num(math.floor(score / bucketMs))
  local k = P .. 'due:' .. b
  if redis.call('ZREM', k, member) == 0 then
    return false
  end
  if redis.call('ZCARD', k) == 0 then
    redis.call('ZREM', bucketsKey, b)
  end
  return true
end

-- The job field 'rl' lists the due times of the job's active runs as ",d1,d2,".
local function runs_add(jobKey, due)
  local rl = redis.call('HGET', jobKey, 'rl')
  if not rl or rl == '' then
    rl = ','
  end
  redis.call('HSET', jobKey, 'rl', rl .. due .. ',')
end

local function runs_del(jobKey, due)
  local rl = redis.call('HGET', jobKey, 'rl')
  if rl then
    local s, n = string.gsub(rl, ',' .. due .. ',', ',', 1)
    if n > 0 then
      redis.call('HSET', jobKey, 'rl', s)
    end
  end
end

local function runs_active(rl)
  return rl and rl ~= '' and rl ~= ','
end

-- ready_score orders a queue: higher priority first, then earlier due time.
local function ready_score(pri, due)
  return (9 - tonumber(pri)) * 1e13 + tonumber(due)
end

-- enqueue makes an existing run hash ready, or parks it when its job is paused.
-- Returns true when the run went into the ready set.
local function enqueue(P, member, q, pri, due, jobState)
  local runKey = P .. 'run:' .. member
  if jobState == 'paused' then
    redis.call('HSET', runKey, 'st', 'paused')
    return false
  end
  redis.call('HSET', runKey, 'st', 'ready')
  redis.call('ZADD', P .. 'ready:' .. q, ready_score(pri, due), member)
  return true
end

-- new_run creates the run hash of a new occurrence, lists it on its job and enqueues it.
local function new_run(P, jobKey, jobID, due, q, pri, jobState)
  local member = jobID .. ':' .. due
  redis.call('HSET', P .. 'run:' .. member, 'att', 0, 'dl', 0)
  runs_add(jobKey, due)
  return enqueue(P, member, q, pri, due, jobState), member
end

-- hist records one history entry of a job and keeps the newest `keep`.
local function hist(P, jobID, keep, entry)
  local k = P .. 'hist:' .. jobID
  redis.call('LPUSH', k, cjson.encode(entry))
  redis.call('LTRIM', k, 0, keep - 1)
end

-- final reports whether a job state is final.
local function final(st)
  return st == 'completed' or st == 'dead' or st == 'cancelled'
end

-- candidate picks, from "from,c1,c2,..." (ascending ms: every occurrence after `from`
-- up to the last one), the first occurrence strictly after now. It returns nil when the
-- list does not cover now (from > now, or no occurrence after now): the caller's clock
-- estimate was off.
local function candidate(list, now)
  local first = true
  for c in string.gmatch(list, '[^,]+') do
    if first then
      if tonumber(c) > now then
        return nil
      end
      first = false
    elseif tonumber(c) > now then
      return c
    end
  end
  return nil
end
