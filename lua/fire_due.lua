-- fire_due: under the caller's shard lease, move the shard's due one-time runs and
-- retries to their ready sets, and return the due occurrences of cron jobs, which the
-- dispatcher plans (next time, misfire policy) and fires with fire_runs. One call per
-- wake-up of a shard loop in the common case.
--
-- KEYS[1] buckets   ZSET    index of non-empty due buckets
-- KEYS[2] inflight  ZSET    claimed runs; score = visibility deadline ms (and common's INFLIGHT_PIN)
-- KEYS[3] lease     STRING  `owner:epoch` of the dispatcher that owns the shard
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] bucket    ms      due bucket width
-- ARGV[3] lease     string  the caller's `owner:epoch`
-- ARGV[4] limit     count   most due entries to handle
-- ARGV[5] channel   string  ready channel prefix: when given, the script publishes the
--                           ready signal "<shard> <now µs>" to channel..queue for every queue
--                           that got runs (one hop sooner than the caller could)
-- ARGV[6] shard     string  the shard's number, for the signal
-- ARGV[7] lead      ms      fire runs due up to this long after now (default 0): the
--                           worker SDK holds a run claimed early until its due time
--                           (Redis clock), so the fire and claim round trips are paid
--                           before the due time instead of after it
-- ARGV[8] thaw     ms      thaw the cold jobs of buckets that start up to this long after
--                          now (default 0: when due), at most THAW_MAX per call
--
-- Derived keys: P..'due:'..bucket, P..'job:'..id, P..'ready:'..queue, P..'stats', and
--               the keys of the cold, packed and plain forms (their includes)
--
-- Due buckets hold the runs of job hashes only (a packed job's scheduled run is a plain
-- run; a cold job's is in its record until it is thawed). Packed jobs that succeeded are
-- deleted once their expiry has passed (packed_expire).
--
-- Returns: { now, next_due, next_deadline, fired, queues, cron }
--   now            the server's clock, ms
--   next_due       earliest due time after now + lead (ms), or when the next cold bucket
--                  is to be thawed or the next expiry bucket of packed jobs ends if that
--                  is sooner; now when more entries are due than limit, more cold jobs
--                  are to be thawed or more packed jobs deleted; -1 when nothing is
--                  scheduled
--   next_deadline  earliest visibility deadline of a claimed run (ms), -1 when none
--   fired          runs made ready; queues: the queues that received them
--   cron           per due cron occurrence up to now + lead (left in place for
--                  fire_runs), 7 entries:
--                  member, score, cron, tz, version, misfire policy, misfire threshold ms
--   or -3 when the caller does not hold the lease (nothing changed).
--- @include "forms"

local bucketsKey, inflightKey, leaseKey = KEYS[1], KEYS[2], KEYS[3]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local limit = tonumber(ARGV[4])

if redis.call('GET', leaseKey) ~= ARGV[3] then
  return -3
end

local now, nowUs, nowStr = now_ms()

-- Cold jobs whose bucket starts within the thaw time become job hashes, a slice of
-- records per call, before the due runs are read: a late thaw fires at once.
local thawMs = tonumber(ARGV[8] ~= nil and ARGV[8] ~= '' and ARGV[8] or '0')
local thawMore, nextThaw = cold_thaw_due(P, bucketsKey, bucketMs, now, thawMs)
-- Succeeded packed jobs past their expiry are deleted.
local expireMore, nextExpiry = packed_expire(P, now)

-- Entries due up to the horizon fire now.
local horizonStr = nowStr
if ARGV[7] and ARGV[7] ~= '' and ARGV[7] ~= '0' then
  horizonStr = num(now + tonumber(ARGV[7]))
end
local cron = {}
local count, fired = 0, 0
local match = string.match

-- Numbers are passed to redis.call as strings: Lua formats a number argument with printf.
local buckets = redis.call('ZRANGEBYSCORE', bucketsKey, '-inf', horizonStr, 'LIMIT', '0', '64')
local lastB
for _, b in ipairs(buckets) do
  if count >= limit then
    break
  end
  lastB = b
  -- Without scores: Redis formats each score with printf, and only cron entries need it.
  local dueKey = P .. 'due:' .. b
  local due = redis.call('ZRANGEBYSCORE', dueKey, '-inf', horizonStr, 'LIMIT', '0', count == 0 and ARGV[4] or num(limit - count))
  for _, member in ipairs(due) do
    count = count + 1
    local id, d = match(member, '^([^:]*):(.*)$') -- split_run, inlined
    local jobKey = P .. 'job:' .. id
    -- The fields every entry needs; a retry's run and a cron job's plan are read when met.
    local j = redis.call('HMGET', jobKey, 'st', 'rl', 'q', 'pr', 'sk')
    local st, rl, q, pri = j[1], j[2], j[3], j[4]
    local once = field(j[5], 'at') == 'at'
    if not st then
      -- The job is gone.
      unfile_later(b, member, UNKNOWN_Q)
    elseif rl_has(rl, d) then
      -- A retry (or snoozed run) whose time has come.
      unfile_later(b, member, q)
      if fire_retry(jobKey, member, d, q, pri, st, once, redis.call('HGET', jobKey, 'r' .. d)) then
        fired = fired + 1
      end
    elseif final(st) or st == 'paused' then
      unfile_later(b, member, q)
    elseif once then
      unfile_later(b, member, q)
      add_ready(q, pri, d, member)
      fired = fired + 1
      redis.call('HSET', jobKey, 'st', 'ready', 'nx', '0', 'rl', rl_add(rl, d))
    else
      local c = redis.call('HMGET', jobKey, 'sc', 'tz', 'ver', 'mf', 'mt')
      table.insert(cron, member)
      table.insert(cron, tonumber(redis.call('ZSCORE', dueKey, member)))
      table.insert(cron, c[1])
      table.insert(cron, field(c[2], ''))
      table.insert(cron, field(c[3], ''))
      table.insert(cron, field(c[4], 'run_once'))
      table.insert(cron, field(c[5], '60000'))
    end
  end
end

-- Plain runs due up to the horizon, with what is left of the limit.
if count < limit then
  local n = plain_fire(P, horizonStr, limit - count)
  count, fired = count + n, fired + n
end

-- The earliest entry after the horizon: such entries are only in the bucket that holds the
-- horizon and later ones, so when the last bucket fired from has one, it is the earliest (and
-- that bucket is not empty). Otherwise the first buckets of the index are searched. The
-- plain runs' earliest is the first of their index (after the horizon, or more is due).
local nextDue = -1
local keep
if count >= limit or #buckets == 64 then
  -- More is due (or more due buckets than one call reads): go again at once.
  nextDue = now
elseif lastB then
  local first = redis.call('ZRANGEBYSCORE', P .. 'due:' .. lastB, '(' .. horizonStr, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
  if first[2] then
    nextDue, keep = tonumber(first[2]), lastB
  end
end
flush_unfile(P, bucketsKey, keep)
if nextDue == -1 then
  for _, b in ipairs(redis.call('ZRANGE', bucketsKey, '0', '2')) do
    local first = redis.call('ZRANGEBYSCORE', P .. 'due:' .. b, '(' .. horizonStr, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    if first[2] then
      nextDue = tonumber(first[2])
      break
    end
  end
end
if nextDue ~= now then
  local t = plain_earliest(P)
  if t and (nextDue == -1 or t < nextDue) then
    nextDue = t
  end
end

if thawMore or expireMore then
  nextDue = now
else
  if nextExpiry and (nextDue == -1 or nextExpiry < nextDue) then
    nextDue = nextExpiry
  end
  if nextThaw and (nextDue == -1 or nextThaw < nextDue) then
    nextDue = nextThaw
  end
end

local nextDeadline = -1
local dl = redis.call('ZRANGE', inflightKey, '0', '0', 'WITHSCORES')
if dl[2] and dl[1] ~= INFLIGHT_PIN then
  nextDeadline = tonumber(dl[2])
end

local readied = flush_ready(P)
flush_stats(P)
publish_ready(ARGV[5], ARGV[6], nowUs, readied)
return { now, nextDue, nextDeadline, fired, readied, cron }
