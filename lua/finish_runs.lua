-- finish_runs: end attempts of claimed runs: ack, fail (retry with backoff or move to the
-- dead-letter set), cancel, snooze, hand back; or reap runs whose visibility deadline
-- passed (lost workers), which then take the fail path.
--
-- KEYS[1] inflight  ZSET    claimed runs; score = visibility deadline ms
-- KEYS[2] buckets   ZSET    index of non-empty due buckets
-- KEYS[3] dead      ZSET    dead-letter set; score = when the run died (ms)
-- KEYS[4] lease     STRING  `owner:epoch` of the shard's dispatcher (reap mode only)
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] bucket    ms      due bucket width
-- ARGV[3] keep      count   history entries kept per job
-- ARGV[4] retention ms      how long finished one-time jobs are kept
-- ARGV[5] mode      'worker' | 'reap'
-- ARGV[6] lease     string  reap: the caller's `owner:epoch`; worker: unused
-- ARGV[7] rand      float   in [0,1), seeds retry jitter
-- ARGV[8] n         count   worker: entries that follow; reap: most runs to reap
-- worker mode, per entry: member, token, outcome, error, delay ms
--   outcome 'ok'       the run succeeded
--           'error'    retry after the job's backoff, or dead after the last attempt
--           'cancel'   do not retry (worker.Cancel); a one-time job ends cancelled
--           'snooze'   retry after delay ms without using an attempt
--           'handback' ready again at once without using an attempt (worker shutdown)
--   A run whose job was cancelled while it ran ends cancelled whatever the outcome.
--
-- Derived keys: P..'run:'..member, P..'job:'..id, P..'hist:'..id, P..'due:'..bucket,
--               P..'ready:'..queue
--
-- Returns: { results, queues }
--   results  worker mode: per entry 1 done, -2 the run is not held with this token
--            (redelivered after its deadline, or finished); reap mode: runs reaped
--   queues   queues that received ready runs (hand-backs, released buffered runs)
--   or -3 in reap mode when the caller does not hold the lease (nothing changed).
--- @include "common"

local inflightKey, bucketsKey, deadKey, leaseKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local keep = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])
local mode = ARGV[5]
local rand = tonumber(ARGV[7])
local n = tonumber(ARGV[8])

if mode == 'reap' and redis.call('GET', leaseKey) ~= ARGV[6] then
  return -3
end

local now = now_ms()
local queues, seen = {}, {}
local function readied(q)
  if not seen[q] then
    seen[q] = true
    table.insert(queues, q)
  end
end

-- next_rand walks a low-discrepancy sequence from the caller's random seed.
local function next_rand()
  rand = (rand + 0.6180339887498949) % 1
  return rand
end

local function expire_job(id, jobKey)
  redis.call('PEXPIRE', jobKey, retention)
  redis.call('PEXPIRE', P .. 'hist:' .. id, retention)
end

-- release_buffered makes a recurring job's buffered occurrence ready.
local function release_buffered(id, jobKey, j)
  local bf = j[7]
  if bf and bf ~= '' and not final(j[1]) then
    redis.call('HDEL', jobKey, 'bf')
    runs_add(jobKey, bf)
    if enqueue(P, id .. ':' .. bf, j[3], j[4], bf, j[1]) then
      readied(j[3])
    end
  end
end

local function finish(member, outcome, token, errmsg, delay)
  local runKey = P .. 'run:' .. member
  local r = redis.call('HMGET', runKey, 'tok', 'st', 'att', 'wk', 'sa')
  if token and r[1] ~= token then
    return -2
  end
  if redis.call('ZREM', inflightKey, member) == 0 then
    return -2
  end
  local id, due = split_run(member)
  local jobKey = P .. 'job:' .. id
  local j = redis.call('HMGET', jobKey, 'st', 'sk', 'q', 'pr', 'ma', 'ib', 'bf', 'mb', 'mu', 'ji')
  local att = tonumber(r[3]) or 1
  if r[2] == 'cancelled' or (j[1] == 'cancelled' and outcome ~= 'ok') then
    outcome = 'cancel'
  end
  if not j[1] then
    redis.call('DEL', runKey)
    return 1
  end
  local entry = { d = tonumber(due), s = tonumber(r[5]), e = now, w = r[4], a = att }
  local once = j[2] == 'at'

  if outcome == 'handback' then
    redis.call('HSET', runKey, 'att', att - 1)
    if enqueue(P, member, j[3], j[4], due, j[1]) then
      readied(j[3])
      if once then
        redis.call('HSET', jobKey, 'st', 'ready')
      end
    end
    return 1
  end

  if outcome == 'error' or outcome == 'lost' or outcome == 'snooze' then
    local ma = tonumber(j[5]) or 1
    if outcome == 'snooze' or att < ma then
      local when
      if outcome == 'snooze' then
        redis.call('HSET', runKey, 'att', att - 1)
        when = now + delay
        entry.o = 'snoozed'
      else
        local d = tonumber(j[6]) * tonumber(j[9]) ^ (att - 1)
        d = math.min(d, tonumber(j[8]))
        d = d * (1 + tonumber(j[10]) * (2 * next_rand() - 1))
        when = now + math.floor(d)
        entry.o = outcome == 'lost' and 'lost' or 'failed'
        entry.er = errmsg
      end
      redis.call('HSET', runKey, 'st', 'retrying', 'ra', num(when))
      file_due(P, bucketsKey, bucketMs, member, when)
      if once and j[1] ~= 'paused' then
        redis.call('HSET', jobKey, 'st', 'retrying')
      end
      entry.r = when
      hist(P, id, keep, entry)
      return 1
    end
    -- Out of attempts: dead-letter set. The run hash stays for a requeue.
    redis.call('HSET', runKey, 'st', 'dead', 'er', errmsg, 'ea', now)
    redis.call('ZADD', deadKey, now, member)
    runs_del(jobKey, due)
    entry.o = 'dead'
    entry.er = errmsg
    hist(P, id, keep, entry)
    if once then
      redis.call('HSET', jobKey, 'st', 'dead')
    else
      release_buffered(id, jobKey, j)
    end
    return 1
  end

  -- Succeeded or cancelled: the run is over.
  redis.call('DEL', runKey)
  runs_del(jobKey, due)
  if outcome == 'ok' then
    entry.o = 'succeeded'
  else
    entry.o = 'cancelled'
    entry.er = errmsg
  end
  hist(P, id, keep, entry)
  if once then
    if j[1] ~= 'cancelled' then
      redis.call('HSET', jobKey, 'st', outcome == 'ok' and 'completed' or 'cancelled')
    end
    expire_job(id, jobKey)
  else
    release_buffered(id, jobKey, j)
  end
  return 1
end

if mode == 'reap' then
  local reaped = 0
  local expired = redis.call('ZRANGEBYSCORE', inflightKey, '-inf', now, 'LIMIT', 0, n)
  for _, member in ipairs(expired) do
    if finish(member, 'lost', nil, 'visibility timeout expired: worker lost or stalled without heartbeat', 0) == 1 then
      reaped = reaped + 1
    end
  end
  return { reaped, queues }
end

local results = {}
local i = 9
for _ = 1, n do
  table.insert(results, finish(ARGV[i], ARGV[i + 2], ARGV[i + 1], ARGV[i + 3], tonumber(ARGV[i + 4]) or 0))
  i = i + 5
end
return { results, queues }
