-- peek_due: read the runs of one shard that are due now, with what the dispatcher needs
-- to compute the next occurrences of cron jobs. Changes nothing.
--
-- KEYS[1] buckets   ZSET  index of non-empty due buckets
-- KEYS[2] inflight  ZSET  claimed runs; score = visibility deadline ms
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] limit     count   most entries to return
--
-- Derived keys: P..'due:'..bucket, P..'job:'..id
--
-- Returns: { now, next_due, next_deadline, entries }
--   now            the server's clock, ms
--   next_due       earliest due time after now (ms), now when more entries are due than
--                  limit, -1 when nothing is scheduled
--   next_deadline  earliest visibility deadline of a claimed run (ms), -1 when none
--   entries        per due run, 8 entries: member, score, kind, cron, tz, version,
--                  misfire policy, misfire threshold ms
--                  kind is 'retry' (the run exists already), 'once', 'cron' or 'gone'
--                  (the job no longer exists); cron..threshold are '' unless kind is 'cron'
--- @include "common"

local bucketsKey, inflightKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local limit = tonumber(ARGV[2])

local now = now_ms()
local entries = {}
local count = 0

local buckets = redis.call('ZRANGEBYSCORE', bucketsKey, '-inf', now, 'LIMIT', 0, 64)
for _, b in ipairs(buckets) do
  if count >= limit then
    break
  end
  local due = redis.call('ZRANGEBYSCORE', P .. 'due:' .. b, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit - count)
  for k = 1, #due, 2 do
    local member, score = due[k], due[k + 1]
    count = count + 1
    local kind, cron, tz, ver, mf, mt = 'once', '', '', '', '', ''
    local id, d = split_run(member)
    local j = redis.call('HMGET', P .. 'job:' .. id, 'st', 'rl', 'sk', 'sc', 'tz', 'ver', 'mf', 'mt')
    if not j[1] then
      kind = 'gone'
    elseif rl_has(j[2], d) then
      kind = 'retry'
    elseif j[3] == 'cron' then
      kind, cron, tz, ver = 'cron', j[4], field(j[5], ''), field(j[6], '')
      mf, mt = field(j[7], 'run_once'), field(j[8], '60000')
    end
    table.insert(entries, member)
    table.insert(entries, score)
    table.insert(entries, kind)
    table.insert(entries, cron)
    table.insert(entries, tz)
    table.insert(entries, ver)
    table.insert(entries, mf)
    table.insert(entries, mt)
  end
end

local nextDue = -1
if count >= limit then
  nextDue = now
else
  for _, b in ipairs(redis.call('ZRANGE', bucketsKey, 0, 2)) do
    local first = redis.call('ZRANGEBYSCORE', P .. 'due:' .. b, '(' .. num(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if first[2] then
      nextDue = tonumber(first[2])
      break
    end
  end
end

local nextDeadline = -1
local d = redis.call('ZRANGE', inflightKey, 0, 0, 'WITHSCORES')
if d[2] then
  nextDeadline = tonumber(d[2])
end

return { now, nextDue, nextDeadline, entries }
