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
-- Derived keys: P..'due:'..bucket, P..'job:'..id, P..'ready:'..queue, P..'stats',
--               P..'cold', P..'pack:'..bucket, P..'jobs:'..slot, P..'jobs:packed',
--               P..'runs:packed', P..'expiry', P..'expiry:'..bucket,
--               P..'plain:'..pri..':'..queue, P..'plains'
--
-- Packed jobs that succeeded (common's PACKED) are deleted once their expiry has passed,
-- EXPIRE_MAX a call, from the lists of the expiry buckets that ended by now.
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
--- @include "common"

local bucketsKey, inflightKey, leaseKey = KEYS[1], KEYS[2], KEYS[3]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local limit = tonumber(ARGV[4])

if redis.call('GET', leaseKey) ~= ARGV[3] then
  return -3
end

local now, nowUs, nowStr = now_ms()

-- Cold jobs whose bucket starts within the thaw time become ordinary jobs, a slice of
-- records per call, before the due runs are read: a late thaw fires at once.
local THAW_MAX = 256
local thawMs = tonumber(ARGV[8] ~= nil and ARGV[8] ~= '' and ARGV[8] or '0')
local coldKey = P .. 'cold'
local thawMore = false
local packs = redis.call('ZRANGEBYSCORE', coldKey, '-inf', num(now + thawMs), 'LIMIT', '0', '8')
local thawLeft = THAW_MAX
for _, b in ipairs(packs) do
  local recs = redis.call('LPOP', P .. 'pack:' .. b, num(thawLeft))
  if recs then
    local bn, members = tonumber(b), {}
    for _, rec in ipairs(recs) do
      local id, dueStr, f = cold_fields(rec, bn, bucketMs)
      -- A record whose job left the index (thaw_job took it) is stale.
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
    thawLeft = thawLeft - #recs
  end
  if thawLeft <= 0 then
    thawMore = true
    break
  end
  -- LPOP took the last record: the list is gone.
  redis.call('ZREM', coldKey, b)
end
-- Succeeded packed jobs past their expiry are deleted.
local EXPIRE_MAX = 256
local expiryKey = P .. 'expiry'
local expireMore = false
-- The first expiry bucket: deleted from now when it has ended, else when to come back.
local firstExpiry = redis.call('ZRANGE', expiryKey, '0', '0', 'WITHSCORES')
local nextExpiry = firstExpiry[2] and tonumber(firstExpiry[2])
local eb = nextExpiry and nextExpiry <= now and firstExpiry[1]
if eb then
  local listKey = P .. 'expiry:' .. eb
  local ids = redis.call('LPOP', listKey, num(EXPIRE_MAX))
  if ids then
    local runs = redis.call('HMGET', P .. PACKED_RUNS, unpack(ids))
    local gone = {}
    for k, id in ipairs(ids) do
      -- One unpacked since (its job hash expires by itself) has no packed state; one
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
    redis.call('ZREM', expiryKey, eb)
  end
  expireMore = true
end

-- Entries due up to the horizon fire now.
local horizonStr = nowStr
if ARGV[7] and ARGV[7] ~= '' and ARGV[7] ~= '0' then
  horizonStr = num(now + tonumber(ARGV[7]))
end
local cron = {}
local count, fired = 0, 0
local match, find, sub, byte = string.match, string.find, string.sub, string.byte

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
  -- The packed jobs among them (common's PACKED), read at once.
  local ids, dues, packed = {}, {}, {}
  for k, member in ipairs(due) do
    ids[k], dues[k] = match(member, '^([^:]*):(.*)$') -- split_run, inlined
  end
  if #due > 0 then
    packed = redis.call('HMGET', P .. PACKED, unpack(ids))
  end
  -- The bucket's removals of packed runs, and the ready runs and count of the queue of
  -- the packed run before (most runs of a call share a queue): unfile_later and
  -- add_ready, with their lists and counts kept across the packed runs, the most common.
  local unfiled, readyQ, adds, inQ = {}
  -- readyTail is readyQ..'|', as it follows the creation time and visibility timeout in
  -- a packed value.
  local readyTail
  -- Whether every entry read is a packed run: none of them is left in the bucket, and no
  -- call changed the bucket since the read.
  local packedOnly = true
  for k, member in ipairs(due) do
    count = count + 1
    local id, d = ids[k], dues[k]
    local pv = packed[k]
    if pv then
      -- A packed job's first run: ready (its member in the ready set is its state). Its
      -- value starts "cr|vt|q|pr|" (common's PACKED). The common case, a creation time
      -- of 13 digits, the queue of the packed run before and a priority of one digit or
      -- the default, is read by position: no pattern match, and no string made for
      -- either.
      local qs
      if byte(pv, 14) == 124 then
        qs = byte(pv, 15) == 124 and 16 or (find(pv, '|', 15, true) or -1) + 1
      end
      local score
      if qs and readyTail and #d == 13 and find(pv, readyTail, qs, true) == qs then
        local ps = qs + #readyTail
        local b = byte(pv, ps)
        if b == 124 then
          score = PRI_DIGIT['5'] .. d -- the default priority
        elseif byte(pv, ps + 1) == 124 then
          score = PRI_BYTE_DIGIT[b] and PRI_BYTE_DIGIT[b] .. d
        end
      end
      if not score then
        local q, pri = match(pv, '^%d+|%d*|([^|]*)|(%d*)|')
        if q == '' then
          q = 'default'
        end
        if q ~= readyQ then
          if inQ then
            stat('s', readyQ, -inQ)
          end
          readyQ, readyTail, adds, inQ = q, q .. '|', ready_list(q), 0
        end
        score = ready_score_str(pri, d)
      end
      inQ = inQ + 1
      unfiled[#unfiled + 1] = member
      local a = #adds
      adds[a + 1], adds[a + 2] = score, member
      fired = fired + 1
    else
      packedOnly = false
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
  if inQ then
    stat('s', readyQ, -inQ)
  end
  if #unfiled > 0 then
    local l = unfile_list(b) -- listed either way: flush_unfile drops the bucket once empty
    if packedOnly then
      -- The entries read are the bucket's first by rank (ZRANGEBYSCORE from -inf): removed
      -- by rank, without a search for each.
      redis.call('ZREMRANGEBYRANK', dueKey, '0', num(#unfiled - 1))
    else
      for _, m in ipairs(unfiled) do
        l[#l + 1] = m
      end
    end
  end
end

-- Plain runs (common's PLAIN) due up to the horizon, with what is left of the limit: ready
-- in their set's queue at its priority, from their names alone. They are a set's first
-- by rank, removed by rank. The sets that may hold such runs are those the index puts
-- at or before the horizon; each one visited gets its first run's time in the index, or
-- leaves it when emptied.
local plainsKey = P .. PLAINS
for _, name in ipairs(redis.call('ZRANGEBYSCORE', plainsKey, '-inf', horizonStr)) do
  if count >= limit then
    break
  end
  local key = P .. PLAIN .. name
  local plain = redis.call('ZRANGEBYSCORE', key, '-inf', horizonStr, 'LIMIT', '0', num(limit - count))
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
    count, fired = count + np, fired + np
  end
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if first[2] then
    redis.call('ZADD', plainsKey, first[2], name)
  else
    redis.call('ZREM', plainsKey, name)
  end
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
  local first = redis.call('ZRANGE', plainsKey, '0', '0', 'WITHSCORES')
  local t = first[2] and tonumber(first[2])
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
  local c = redis.call('ZRANGE', coldKey, '0', '0', 'WITHSCORES')
  if c[2] then
    local t = math.max(tonumber(c[2]) - thawMs, now)
    if nextDue == -1 or t < nextDue then
      nextDue = t
    end
  end
end

local nextDeadline = -1
local dl = redis.call('ZRANGE', inflightKey, '0', '0', 'WITHSCORES')
if dl[2] and dl[1] ~= INFLIGHT_PIN then
  nextDeadline = tonumber(dl[2])
end

local readied = flush_ready(P)
flush_stats(P)
if ARGV[5] and ARGV[5] ~= '' then
  local msg = ARGV[6] .. ' ' .. nowUs
  for _, q in ipairs(readied) do
    redis.call('PUBLISH', ARGV[5] .. q, msg)
  end
end
return { now, nextDue, nextDeadline, fired, readied, cron }
