-- breaker_step: one step of a push target host's circuit breaker, which every executor
-- process shares: ask whether a delivery may go, or record how one ended.
--
-- KEYS[1] breaker   HASH  the breaker of one target host (a global key: its own slot):
--                         s state ('closed' when absent, 'open', 'half_open'),
--                         f consecutive failures, ws/n/nf the current window's start
--                         ms, attempts and failures, o ms it opened, pu ms until which
--                         the half-open probe is out, at ms of the last transition,
--                         tr transitions ever
-- ARGV[1] op        string  'allow', 'ok' or 'fail'
-- ARGV[2] failures  count   consecutive failures that open it (0: no such rule)
-- ARGV[3] ratio     number  failure ratio in a window that opens it, 0 to 1 (0: no such rule)
-- ARGV[4] minreq    count   attempts a window needs before its ratio counts
-- ARGV[5] window    ms      length of a ratio window
-- ARGV[6] cooldown  ms      how long it stays open before a probe may go
-- ARGV[7] probe_to  ms      how long a probe is out before another may go
-- ARGV[8] probe     flag    '1': the outcome ('ok', 'fail') is the half-open probe's
-- ARGV[9] ttl       ms      the key expires this long after its last change
--
-- Returns: { state, verdict, retry_ms, transition } where state is the state after the
--          step; verdict, for 'allow', is 1 (go), 2 (go as the half-open probe) or 0
--          (refused: retry_ms until a probe may go), and 1 for the other ops;
--          transition is '' or the state entered.
local breakerKey = KEYS[1]
local op = ARGV[1]
local failures, ratio, minreq = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window, cooldown, probeTo = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local probe, ttl = ARGV[8] == '1', tonumber(ARGV[9])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local v = redis.call('HMGET', breakerKey, 's', 'f', 'ws', 'n', 'nf', 'o', 'pu')
local state = v[1] or 'closed'
local f, ws, n, nf = tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0, tonumber(v[5]) or 0
local opened, probeUntil = tonumber(v[6]) or 0, tonumber(v[7]) or 0

local function enter(s, extra)
  redis.call('HSET', breakerKey, 's', s, 'at', now, unpack(extra))
  redis.call('HINCRBY', breakerKey, 'tr', 1)
  redis.call('PEXPIRE', breakerKey, ttl)
  return s
end

if op == 'allow' then
  if state == 'open' then
    if now < opened + cooldown then
      return { state, 0, opened + cooldown - now, '' }
    end
    enter('half_open', { 'pu', now + probeTo })
    return { 'half_open', 2, 0, 'half_open' }
  elseif state == 'half_open' then
    if now < probeUntil then
      return { state, 0, probeUntil - now, '' }
    end
    -- The probe did not report in time (its executor died): another goes.
    redis.call('HSET', breakerKey, 'pu', now + probeTo)
    return { state, 2, 0, '' }
  end
  return { state, 1, 0, '' }
end

if state == 'half_open' then
  if not probe then
    return { state, 1, 0, '' }
  end
  if op == 'ok' then
    redis.call('HDEL', breakerKey, 'f', 'ws', 'n', 'nf', 'o', 'pu')
    return { enter('closed', {}), 1, 0, 'closed' }
  end
  return { enter('open', { 'o', now, 'pu', 0 }), 1, 0, 'open' }
end
if state == 'open' then
  return { state, 1, 0, '' }
end

-- closed: count the outcome. A host without a key (no failure lately) keeps none on
-- success, so a window starts at its first failure.
if op == 'ok' and v[1] == false and v[3] == false then
  return { state, 1, 0, '' }
end
if now - ws >= window then
  ws, n, nf = now, 0, 0
end
n = n + 1
if op == 'ok' then
  f = 0
else
  f = f + 1
  nf = nf + 1
end
if op == 'fail' and ((failures > 0 and f >= failures) or (ratio > 0 and n >= minreq and nf / n >= ratio)) then
  redis.call('HDEL', breakerKey, 'f', 'ws', 'n', 'nf')
  return { enter('open', { 'o', now, 'pu', 0 }), 1, 0, 'open' }
end
redis.call('HSET', breakerKey, 'f', f, 'ws', ws, 'n', n, 'nf', nf)
redis.call('PEXPIRE', breakerKey, ttl)
return { state, 1, 0, '' }
