-- breaker_step: one step of a push target host's circuit breaker, which every executor
-- process shares: ask whether a delivery may go, record how deliveries ended (one, or
-- a process's outcomes since its last step, in aggregate), or both.
--
-- KEYS[1] breaker   HASH  the breaker of one target host (a global key: its own slot):
--                         s state ('closed' when absent, 'open', 'half_open'),
--                         f consecutive failures, ws/n/nf the current window's start
--                         ms, attempts and failures, o ms it opened, pu ms until which
--                         the half-open probe is out, at ms of the last transition,
--                         tr transitions ever
-- ARGV[1] op        string  'allow', 'ok', 'fail' or 'add': 'ok' and 'fail' record one
--                           outcome; 'add' records the counts of ARGV[11..15]; 'allow'
--                           records them (if any), then asks whether a delivery may go
-- ARGV[2] failures  count   consecutive failures that open it (0: no such rule)
-- ARGV[3] ratio     number  failure ratio in a window that opens it, 0 to 1 (0: no such rule)
-- ARGV[4] minreq    count   attempts a window needs before its ratio counts
-- ARGV[5] window    ms      length of a ratio window
-- ARGV[6] cooldown  ms      how long it stays open before a probe may go
-- ARGV[7] probe_to  ms      how long a probe is out before another may go
-- ARGV[8] probe     flag    '1': the outcome ('ok', 'fail') is the half-open probe's
-- ARGV[9] ttl       ms      the key expires this long after its last change
-- ARGV[10] wait     ms      while the probe is out, a refused delivery asks again after
--                           this long, or after as long as the probe has been out if
--                           that is longer (never after the probe's timeout): the
--                           probe's outcome closes or re-opens the breaker at once, and
--                           the runs refused meanwhile must not wait for its timeout
-- ARGV[11] oks      count   ('add', 'allow') successes to record
-- ARGV[12] fails    count   ('add', 'allow') failures to record
-- ARGV[13] lead     count   of those, the failures before the first success
-- ARGV[14] longest  count   the longest run of consecutive failures among them
-- ARGV[15] trail    count   the failures after the last success
--
-- Outcomes other than the probe's count only while closed. A host without a key (no
-- failure lately) keeps none on success.
--
-- Returns: { state, verdict, retry_ms, transition, f, n, nf } where state is the state
--          after the step; verdict, for 'allow', is 1 (go), 2 (go as the half-open
--          probe) or 0 (refused), and 1 for the other ops; retry_ms is, when open, the
--          time until a probe may go, and when half-open how long a refused delivery
--          waits before asking again (0 when closed); transition is '' or the state
--          entered (the last, if two); f, n, nf are the consecutive failures and the
--          window's attempts and failures after the step (0 unless closed).
local breakerKey = KEYS[1]
local op = ARGV[1]
local failures, ratio, minreq = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local window, cooldown, probeTo = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local probe, ttl, wait = ARGV[8] == '1', tonumber(ARGV[9]), tonumber(ARGV[10])
local oks, fails, lead, longest, trail = 0, 0, 0, 0, 0
if op == 'ok' then
  oks = 1
elseif op == 'fail' then
  fails, lead, longest, trail = 1, 1, 1, 1
elseif ARGV[11] then
  oks, fails = tonumber(ARGV[11]), tonumber(ARGV[12])
  lead, longest, trail = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local v = redis.call('HMGET', breakerKey, 's', 'f', 'ws', 'n', 'nf', 'o', 'pu')
local state = v[1] or 'closed'
local f, ws, n, nf = tonumber(v[2]) or 0, tonumber(v[3]) or 0, tonumber(v[4]) or 0, tonumber(v[5]) or 0
local opened, probeUntil = tonumber(v[6]) or 0, tonumber(v[7]) or 0
local transition = ''

local function enter(s, extra)
  redis.call('HSET', breakerKey, 's', s, 'at', now, unpack(extra))
  redis.call('HINCRBY', breakerKey, 'tr', 1)
  redis.call('PEXPIRE', breakerKey, ttl)
  state, transition = s, s
end

-- retry is the reply's retry_ms for the state as it stands.
local function retry()
  if state == 'open' then
    return math.max(opened + cooldown - now, 0)
  elseif state == 'half_open' then
    local out = now - (probeUntil - probeTo)
    return math.max(math.min(probeUntil - now, math.max(wait, out)), 0)
  end
  return 0
end

local function reply(verdict)
  if state ~= 'closed' then
    f, n, nf = 0, 0, 0
  end
  return { state, verdict, retry(), transition, f, n, nf }
end

if probe and (op == 'ok' or op == 'fail') then
  if state ~= 'half_open' then
    return reply(1)
  end
  if op == 'ok' then
    redis.call('HDEL', breakerKey, 'f', 'ws', 'n', 'nf', 'o', 'pu')
    f, n, nf = 0, 0, 0
    enter('closed', {})
  else
    opened = now
    enter('open', { 'o', now, 'pu', 0 })
  end
  return reply(1)
end

-- Count the outcomes while closed.
if state == 'closed' and oks + fails > 0 and not (fails == 0 and v[1] == false and v[3] == false) then
  if now - ws >= window then
    ws, n, nf = now, 0, 0
  end
  n, nf = n + oks + fails, nf + fails
  local peak = math.max(f + lead, longest)
  if oks > 0 then
    f = trail
  else
    f = f + fails
  end
  if fails > 0 and ((failures > 0 and peak >= failures) or (ratio > 0 and n >= minreq and nf / n >= ratio)) then
    redis.call('HDEL', breakerKey, 'f', 'ws', 'n', 'nf')
    opened = now
    enter('open', { 'o', now, 'pu', 0 })
  else
    redis.call('HSET', breakerKey, 'f', f, 'ws', ws, 'n', n, 'nf', nf)
    redis.call('PEXPIRE', breakerKey, ttl)
  end
end

if op ~= 'allow' then
  return reply(1)
end
if state == 'open' then
  if now < opened + cooldown then
    return reply(0)
  end
  probeUntil = now + probeTo
  enter('half_open', { 'pu', probeUntil })
  return reply(2)
elseif state == 'half_open' then
  if now < probeUntil then
    return reply(0)
  end
  -- The probe did not report in time (its executor died): another goes.
  probeUntil = now + probeTo
  redis.call('HSET', breakerKey, 'pu', probeUntil)
  return reply(2)
end
return reply(1)
