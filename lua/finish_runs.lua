-- finish_runs: end attempts of claimed runs: ack, fail (retry with backoff or move to the
-- dead-letter set), cancel, snooze, hand back; or reap runs whose visibility deadline
-- passed (lost workers), which then take the fail path.
--
-- KEYS[1] inflight  ZSET    claimed runs; score = visibility deadline ms (and common's INFLIGHT_PIN)
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
-- ARGV[8] ready     string  ready channel prefix: when given, the script publishes the
--                           ready signal "<shard> <now µs>" to ready..queue for every
--                           queue that got runs, and the wake signal "<shard> <due ms>"
--                           to ARGV[9] for a retry earlier than the shard's runs; also
--                           when the call fails after part of its work (a workflow whose
--                           move fails), which has no reply to signal from
-- ARGV[9] wake      string  wake channel
-- ARGV[10] shard    string  the shard's number, for the signals
-- ARGV[11] n        count   worker: entries that follow; reap: most runs to reap
-- ARGV[12] token    string  worker: the token of the short entries
-- worker mode, n entries after ARGV[12], each either short or long:
--   short: member, alone: the run succeeded ('ok') with the token of ARGV[12]: what
--          most entries are, and 4 values fewer for Redis to parse and hand to Lua
--   long:  '' (no member is empty), member, token, outcome, error, delay ms
--   outcome 'ok'       the run succeeded
--           'result'   the run succeeded with a result: the error value holds it (bytes);
--                      it is kept in the job hash as x<due> (a packed job thaws first)
--           'error'    retry after the job's backoff (after delay ms instead when delay
--                      is above 0), or dead after the last attempt
--           'cancel'   do not retry (worker.Cancel); a one-time job ends cancelled
--           'snooze'   retry after delay ms without using an attempt
--           'handback' ready again at once without using an attempt (worker shutdown)
--   A run whose job was cancelled while it ran ends cancelled whatever the outcome.
--
-- A recurring job keeps the results of its newest `keep` runs: 'xs' lists their due
-- times, oldest first, and older x<due> fields are deleted as new ones come.
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats',
--               P..'wf:'..wf and P..'wfd:'..def (include workflow), and the packed form's
--               keys (include packed)
--
-- A packed job's run that succeeded is recorded in its packed state, with those of the
-- other runs of the call in one write (packed_done), and moves its workflow when it is a
-- node's (a workflow's root); any other end of it, and a reaped one, thaws its job first
-- (packed_thaw) and takes the paths below.
--
-- Returns: { results, queues, wake }
--   results  worker mode: per entry 1 done, -2 the run is not held with this token
--            (redelivered after its deadline, or finished); reap mode: runs reaped
--   queues   queues that received ready runs (hand-backs, released buffered runs,
--            released workflow nodes; signalled by the script when ARGV[8] is given)
--   wake     the earliest retry or snooze filed when it is earlier than every run the
--            shard held (the dispatcher is signalled), else -1
--   or -3 in reap mode when the caller does not hold the lease (nothing changed).
--- @include "forms"
--- @include "workflow"

local inflightKey, bucketsKey, deadKey, leaseKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local keep = tonumber(ARGV[3])
local retention = ARGV[4]
local mode = ARGV[5]
local rand = tonumber(ARGV[7])
local readyChannel, wakeChannel, shardNo = ARGV[8], ARGV[9], ARGV[10]
local n = tonumber(ARGV[11])

if mode == 'reap' and redis.call('GET', leaseKey) ~= ARGV[6] then
  return -3
end

local now, nowUs, nowStr = now_ms()
local leaving = {}
-- The node ends of this call, moved once per workflow by done (include workflow).
local wfEnds = wf_ends()
-- What a succeeded packed run's state gets after its running state (packed_done).
local doneSuffix = '|' .. nowStr .. '|' .. num(now + tonumber(retention))

-- The earliest retry filed by this call when it is earlier than every run the shard
-- held before it (forms' shard_earliest, read at the first retry): the dispatcher is
-- woken for it, as for a create, so a retry starts at its time and not at the
-- dispatcher's next wake-up.
local earliest, wake = nil, -1
local function file_retry(member, when, q)
  if earliest == nil then
    earliest = shard_earliest(P, bucketsKey) or false
  end
  file_due(P, bucketsKey, bucketMs, member, when, q)
  if (not earliest or when < earliest) and (wake == -1 or when < wake) then
    wake = when
  end
end

-- The result of the entry being finished ('result' entries), else nil.
local result = nil

-- keep_result stores result as the run's x<due> field and lists due in 'xs', whose
-- oldest entries beyond keep lose their results.
local function keep_result(jobKey, due)
  local list = {}
  for d in string.gmatch(redis.call('HGET', jobKey, 'xs') or '', '([^,]+),') do
    if d ~= due then
      list[#list + 1] = d
    end
  end
  list[#list + 1] = due
  local drop = {}
  while #list > keep do
    drop[#drop + 1] = 'x' .. table.remove(list, 1)
  end
  redis.call('HSET', jobKey, 'x' .. due, result, 'xs', table.concat(list, ',') .. ',')
  if #drop > 0 then
    redis.call('HDEL', jobKey, unpack(drop))
  end
end

-- next_rand walks a low-discrepancy sequence from the caller's random seed.
local function next_rand()
  rand = (rand + 0.6180339887498949) % 1
  return rand
end

-- release_buffered makes a recurring job's buffered occurrence bf ready once no run of
-- the job is active any more (rl, after the ending run left it: a triggered run or a
-- retry counts too, as it does for fire_runs' overlap check): returns the new rl and the
-- field/value pair to write, which keeps bf while a run is still active.
local function release_buffered(jobKey, id, q, pri, st, rl, bf)
  if not bf or bf == '' or final(st) then
    return rl, 'bf', ''
  end
  if runs_active(rl) then
    return rl, 'bf', bf
  end
  local b = run_get(redis.call('HGET', jobKey, 'r' .. bf))
  enqueue(b, id .. ':' .. bf, q, pri, bf, st)
  return rl_add(rl, bf), 'r' .. bf, run_pack(b)
end

local function finish(member, outcome, token, errmsg, delay)
  local id, due = split_run(member)
  local jobKey = P .. 'job:' .. id
  local rf = 'r' .. due
  -- The fields every outcome needs; priority, attempts, history and the buffered run are
  -- read only on the paths that use them (every field read costs about as much as
  -- building a string).
  local j = redis.call('HMGET', jobKey, rf, 'st', 'sk', 'q', 'rl')
  if outcome == 'ok' and j[1] and j[2] ~= 'cancelled' and field(j[3], 'at') == 'at' then
    -- The common case, a one-time job's run succeeded: the run's field is rewritten from
    -- its parts as read, without the general path's tables and number formatting, and
    -- with the end time where a retry time is kept ('ra'). The pattern matches only a run
    -- in flight (running, with a token) whose attempts and deliveries are numbers;
    -- anything else takes the general path. The history is not rewritten: 'hs' names the
    -- run, and readers put its entry first (shard.Store.Runs); the job is final, so no
    -- entry comes after it. The finished job expires whole.
    local att, dl, tok, wk, sa, _, er = string.match(j[1], RUNNING_FIELDS)
    if tok and (not token or tok == token) then
      leaving[#leaving + 1] = member
      stat('f', j[4], -1)
      redis.call('HSET', jobKey, rf, 'succeeded|' .. att .. '|' .. dl .. '||' .. wk .. '|' .. sa .. '|' .. nowStr .. '|' .. er,
        'st', 'completed', 'rl', rl_del(j[5], due), 'hs', due)
      if result then
        keep_result(jobKey, due)
      end
      redis.call('PEXPIRE', jobKey, retention)
      if string.find(id, '@', 1, true) then
        wf_end_later(wfEnds, id, 'succeeded', result, att)
      end
      return 1
    end
  end
  local r = run_get(j[1])
  -- A run holds a token only while it is in flight.
  if r.tok == '' or (token and r.tok ~= token) then
    return -2
  end
  leaving[#leaving + 1] = member
  local st, q, rl = j[2], j[4], j[5]
  stat('f', q, -1)
  if r.st == 'cancelled' or (st == 'cancelled' and outcome ~= 'ok') then
    outcome = 'cancel'
  end
  local att = r.att
  local once = field(j[3], 'at') == 'at'
  r.tok = ''

  local h = redis.call('HGET', jobKey, 'h')
  if outcome == 'ok' and once then
    -- A succeeded one-time run the fast path above did not take (the job was cancelled
    -- while it ran): the run is over and the finished job expires whole.
    r.st = 'succeeded'
    local d = tonumber(due)
    local sa = tonumber(r.sa)
    h = hist_add(h, keep, num(d) .. ',' .. (sa and num(sa - d) or '') .. ',' .. num(now - d) .. ',' .. r.wk .. ',' .. num(att))
    if st == 'cancelled' then
      redis.call('HSET', jobKey, rf, run_pack(r), 'rl', rl_del(rl, due), 'h', h)
    else
      redis.call('HSET', jobKey, rf, run_pack(r), 'st', 'completed', 'rl', rl_del(rl, due), 'h', h)
    end
    if result then
      keep_result(jobKey, due)
    end
    redis.call('PEXPIRE', jobKey, retention)
    if st == 'cancelled' then
      wf_outlive(P, id, retention)
    end
    wf_end_later(wfEnds, id, st == 'cancelled' and 'cancelled' or 'succeeded', result, att)
    return 1
  end

  local pri = redis.call('HGET', jobKey, 'pr')
  local entry = { d = tonumber(due), s = tonumber(r.sa), e = now, w = r.wk, a = att }

  if outcome == 'handback' then
    r.att = att - 1
    if enqueue(r, member, q, pri, due, st) and once then
      redis.call('HSET', jobKey, rf, run_pack(r), 'st', 'ready')
    else
      redis.call('HSET', jobKey, rf, run_pack(r))
    end
    return 1
  end

  if outcome == 'error' or outcome == 'lost' or outcome == 'snooze' then
    local ma = tonumber(field(redis.call('HGET', jobKey, 'ma'), 25))
    if outcome == 'snooze' or att < ma then
      local when
      if outcome == 'snooze' then
        r.att = att - 1
        when = now + (tonumber(delay) or 0)
        entry.o = 'snoozed'
      elseif outcome == 'error' and (tonumber(delay) or 0) > 0 then
        -- The worker's own retry delay (the HTTP API's retry_after).
        when = now + tonumber(delay)
        entry.o = 'failed'
        entry.er = errmsg
      else
        local b = redis.call('HMGET', jobKey, 'ib', 'mb', 'mu', 'ji')
        local d = tonumber(field(b[1], 1000)) * tonumber(field(b[3], 2)) ^ (att - 1)
        d = math.min(d, tonumber(field(b[2], 3600000)))
        d = d * (1 + tonumber(field(b[4], 0.2)) * (2 * next_rand() - 1))
        when = now + math.floor(d)
        entry.o = outcome == 'lost' and 'lost' or 'failed'
        entry.er = errmsg
      end
      r.st, r.ra = 'retrying', num(when)
      file_retry(member, when, q)
      entry.r = when
      h = hist_push(h, keep, entry)
      if once and st ~= 'paused' then
        redis.call('HSET', jobKey, rf, run_pack(r), 'st', 'retrying', 'h', h)
      else
        redis.call('HSET', jobKey, rf, run_pack(r), 'h', h)
      end
      return 1
    end
    -- Out of attempts: dead-letter set. The run's field stays for a requeue.
    r.st, r.ra, r.er = 'dead', num(now), errmsg
    redis.call('ZADD', deadKey, num(now), member)
    stat('d', q, 1)
    entry.o = 'dead'
    entry.er = errmsg
    h = hist_push(h, keep, entry)
    rl = rl_del(rl, due)
    if once then
      redis.call('HSET', jobKey, rf, run_pack(r), 'st', 'dead', 'rl', rl, 'h', h)
      wf_end_later(wfEnds, id, 'failed', nil, att)
    else
      local nrl, bfField, bfValue = release_buffered(jobKey, id, q, pri, st, rl, redis.call('HGET', jobKey, 'bf'))
      redis.call('HSET', jobKey, rf, run_pack(r), 'rl', nrl, 'bf', '', bfField, bfValue, 'h', h)
    end
    return 1
  end

  -- Succeeded (a recurring job) or cancelled: the run is over.
  rl = rl_del(rl, due)
  if outcome == 'ok' then
    entry.o = 'succeeded'
    if result then
      keep_result(jobKey, due)
    end
  else
    entry.o = 'cancelled'
    entry.er = errmsg
  end
  h = hist_push(h, keep, entry)
  if once then
    -- The finished job expires whole; its run field goes with it.
    r.st = 'cancelled'
    if st == 'cancelled' then
      redis.call('HSET', jobKey, rf, run_pack(r), 'rl', rl, 'h', h)
    else
      redis.call('HSET', jobKey, rf, run_pack(r), 'st', 'cancelled', 'rl', rl, 'h', h)
    end
    redis.call('PEXPIRE', jobKey, retention)
    if st == 'cancelled' then
      wf_outlive(P, id, retention)
    end
    -- A node cancelled by its worker (do not retry) failed; by a cancel of its job or
    -- workflow, it was cancelled.
    wf_end_later(wfEnds, id, st == 'cancelled' and 'cancelled' or 'failed', nil, att)
  else
    local nrl, bfField, bfValue = release_buffered(jobKey, id, q, pri, st, rl, redis.call('HGET', jobKey, 'bf'))
    redis.call('HSET', jobKey, 'rl', nrl, 'bf', '', bfField, bfValue, 'h', h)
    redis.call('HDEL', jobKey, rf)
  end
  return 1
end

-- Packed runs that succeeded in this call: their ids and running states (packed_done).
local packedIds, packedRuns = {}, {}

-- done files what the call changed: the workflows moved, the succeeded packed runs, the
-- runs that left the inflight set, ready runs and counts, and signals the queues that got
-- ready runs and the dispatcher of an earlier retry. A workflow whose move fails (a bug)
-- fails the call, after the rest is filed and signalled (include workflow's
-- wf_flush_ends): an error reply carries no queues for the caller to signal, and the
-- runs the call made ready would wait for the workers' sweep.
local function done()
  local ok, err = pcall(wf_flush_ends, wfEnds, P, now, nowStr, keep, retention)
  if #packedIds > 0 then
    packed_done(P, packedIds, packedRuns, doneSuffix, now + tonumber(retention), bucketMs)
  end
  for k = 1, #leaving, 6000 do
    redis.call('ZREM', inflightKey, unpack(leaving, k, math.min(k + 5999, #leaving)))
  end
  local readied = flush_ready(P)
  flush_stats(P)
  publish_ready(readyChannel, shardNo, nowUs, readied)
  if wake ~= -1 and readyChannel and readyChannel ~= '' then
    redis.call('PUBLISH', wakeChannel, shardNo .. ' ' .. num(wake))
  end
  if not ok then
    error(err, 0)
  end
  return readied
end

if mode == 'reap' then
  local reaped = 0
  local expired = redis.call('ZRANGEBYSCORE', inflightKey, '-inf', num(now), 'LIMIT', 0, n)
  local ids, runs = packed_runs(P, expired)
  local ok, err = pcall(function()
    for k, member in ipairs(expired) do
      if runs[k] then
        packed_thaw(P, ids[k])
      end
      if finish(member, 'lost', nil, 'visibility timeout expired: worker lost or stalled without heartbeat', 0) == 1 then
        reaped = reaped + 1
      else
        -- In flight without a held run (its job is gone): nothing to recover; drop it.
        table.insert(leaving, member)
      end
    end
  end)
  local readied = done()
  if not ok then
    error(err, 0)
  end
  return { reaped, readied, wake }
end

-- The members, and where each entry's member is in ARGV: negative for a short entry.
local members, at = {}, {}
local i = 13
for k = 1, n do
  if ARGV[i] == '' then
    members[k], at[k] = ARGV[i + 1], i + 1
    i = i + 6
  else
    members[k], at[k] = ARGV[i], -i
    i = i + 1
  end
end
local shortToken = ARGV[12]

-- finish_long ends the run of a long entry, whose member is ARGV[a]: a 'result' entry's
-- value (ARGV[a + 3]) is the result of a success, any other's the error and the delay.
local function finish_long(member, token, outcome, a)
  if outcome ~= 'result' then
    return finish(member, outcome, token, ARGV[a + 3], ARGV[a + 4])
  end
  result = ARGV[a + 3]
  local r = finish(member, 'ok', token, '', '0')
  result = nil
  return r
end
local ids, runs = packed_runs(P, members)
local finished = {}
-- Packed jobs an entry of this call thawed (any end but a plain success): their packed
-- run states, read above, are gone, and a later entry of the same run is checked against
-- the job hash, as any job hash's is.
local thawed = {}
-- A succeeded packed run's token is checked by a plain search (packed_held_prefix).
local heldBy = {} -- token -> what the state of a run held with it starts with
-- The queue of the last succeeded packed run, and how many of its runs in a row
-- succeeded, counted with one stat call.
local lastQ, lastTail, inQ = 'default', '|default', 0
local find = string.find
local results = {}
-- The entries go as far as they can: an error in one (a bug) still moves the
-- workflows of the entries before it and files what they changed (done), and then
-- fails the call, as it would have before the node ends were collected.
local ok, err = pcall(function()
  for k = 1, n do
    local member, token, outcome = members[k], shortToken, 'ok'
    local a = at[k]
    if a > 0 then
      token, outcome = ARGV[a + 1], ARGV[a + 2]
    end
    local id = ids[k]
    local run = runs[k]
    if run and thawed[id] then
      run = nil
    end
    if run then
      local held = heldBy[token]
      if not held then
        held = packed_held_prefix(token)
        heldBy[token] = held
      end
      if find(run, held, 1, true) ~= 1 or finished[id] then
        -- Not held with this token: finished already, or never claimed with it.
        results[k] = -2
      elseif outcome == 'ok' then
        finished[id] = true
        if not find(run, lastTail, -#lastTail, true) then
          if inQ > 0 then
            stat('f', lastQ, -inQ)
          end
          lastQ, inQ = packed_run_queue(run), 0
          lastTail = '|' .. lastQ
        end
        inQ = inQ + 1
        local d = #packedIds + 1
        packedIds[d], packedRuns[d] = id, run
        leaving[#leaving + 1] = member
        results[k] = 1
        if find(id, '@', 1, true) then
          -- A workflow's root (create_workflow packs them): its first attempt succeeded.
          wf_end_later(wfEnds, id, 'succeeded', nil, 1)
        end
      else
        packed_thaw(P, id)
        thawed[id] = true
        results[k] = finish_long(member, token, outcome, a)
      end
    elseif a > 0 then
      results[k] = finish_long(member, token, outcome, a)
    else
      results[k] = finish(member, 'ok', token, '', '0')
    end
  end
end)
if inQ > 0 then
  stat('f', lastQ, -inQ)
end
local readied = done()
if not ok then
  error(err, 0)
end
return { results, readied, wake }
