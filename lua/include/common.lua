-- common: the helpers every shard script shares, whatever the form of its jobs: the clock,
-- the per-queue counts, due buckets (where a job hash's scheduled runs and every retry
-- live), ready sets, run states, history and schedules. The storage forms of jobs and
-- runs have their own includes (hash, packed, cold, plain; forms is their seam).
--
-- Key layout (P is the shard prefix `<ns>:v2:{<tag>}:`; every key is built in Go by
-- shard/keys.go, and docs/architecture.md lists them all):
--   P..'due:'..bucket  ZSET  runs due in one bucket; score = when they become ready (ms)
--   P..'buckets'       ZSET  index of the non-empty due buckets; score = bucket start (ms)
--   P..'ready:'..queue ZSET  ready runs; score = (9-priority)*1e13 + due_ms (and READY_PIN)
--   P..'inflight'      ZSET  claimed runs; score = visibility deadline (and INFLIGHT_PIN)
--   P..'stats'         HASH  per-queue counts: 's:'..q scheduled (in due buckets, plain
--                            sets or cold), 'f:'..q in flight, 'd:'..q dead, 'n:'..q
--                            runs made ready since creation
-- A run is named by its member id..':'..due_ms in every set. Its state is a field of its
-- job's hash (run_get).

-- now_ms returns the Redis server's clock in milliseconds, the same instant in
-- microseconds as a string (ready signals and claims are ordered by it: see ParseReady),
-- and the milliseconds as a string. Built by cutting TIME's digits: each number parsed or
-- formatted costs more than the cuts.
local function now_ms()
  local t = redis.call('TIME')
  local us = string.sub('00000' .. t[2], -6)
  local msStr = t[1] .. string.sub(us, 1, 3)
  return tonumber(msStr), t[1] .. us, msStr
end

-- num formats an integral number without an exponent. Lua's own number-to-string
-- conversion (and '%.0f') goes through the C library's floating-point printf, which
-- was the largest single cost in profiles of the hot scripts; '%d' is an integer path.
local function num(x)
  return string.format('%d', x)
end

-- later_ms returns the later of two times in ms given as digit strings ('' is the
-- earliest), compared as the strings they are: no number is parsed.
local function later_ms(a, b)
  if #a > #b or (#a == #b and a > b) then
    return a
  end
  return b
end

-- split_run splits a run member "<jobID>:<due>" into the job id and the due time string.
-- Job ids never contain ':' (job.ValidateID), so the first ':' is the separator. One
-- match with two captures costs less than a search and two substrings.
local function split_run(member)
  return string.match(member, '^([^:]*):(.*)$')
end

-- Changes to the per-queue counts of P..'stats' are collected by stat and written by
-- flush_stats, one HINCRBY per field, at the end of a script. The caller of a helper that
-- counts passes the run's queue field as read (nil, false or '' mean the default queue),
-- or UNKNOWN_Q when the job is gone and its queue cannot be known.
local UNKNOWN_Q = {}
-- Created at the first change of a call: a table costs about as much as a field read,
-- and many calls change nothing.
local statDelta, statOrder

local function stat(kind, q, d)
  if q == UNKNOWN_Q then
    return
  end
  if not q or q == '' then
    q = 'default'
  end
  if not statDelta then
    statDelta, statOrder = {}, {}
  end
  local t = statDelta[kind]
  if not t then
    t = {}
    statDelta[kind] = t
  end
  local v = t[q]
  if not v then
    v = 0
    statOrder[#statOrder + 1] = kind
    statOrder[#statOrder + 1] = q
  end
  t[q] = v + d
end

-- flush_stats runs last: flush_ready counts the runs it makes ready ('n').
local function flush_stats(P)
  if not statOrder then
    return
  end
  for i = 1, #statOrder, 2 do
    local kind, q = statOrder[i], statOrder[i + 1]
    local d = statDelta[kind][q]
    if d ~= 0 then
      redis.call('HINCRBY', P .. 'stats', kind .. ':' .. q, num(d))
    end
  end
end

-- file_due puts member into the due bucket of score and records the bucket in the index.
local function file_due(P, bucketsKey, bucketMs, member, score, q)
  stat('s', q, 1)
  local b = math.floor(score / bucketMs)
  redis.call('ZADD', P .. 'due:' .. num(b), num(score), member)
  redis.call('ZADD', bucketsKey, num(b * bucketMs), num(b))
end

-- unfile_due removes member from the due bucket of score; an emptied bucket leaves the index.
-- Returns true when the member was there.
local function unfile_due(P, bucketsKey, bucketMs, member, score, q)
  local b = num(math.floor(score / bucketMs))
  local k = P .. 'due:' .. b
  if redis.call('ZREM', k, member) == 0 then
    return false
  end
  stat('s', q, -1)
  if redis.call('ZCARD', k) == 0 then
    redis.call('ZREM', bucketsKey, b)
  end
  return true
end

-- group returns the list of groups under key, creating it (and recording key in order,
-- so groups are sent in a fixed order) when it is new.
local function group(groups, order, key)
  local l = groups[key]
  if not l then
    l = {}
    groups[key] = l
    order[#order + 1] = key
  end
  return l
end

-- Removals from due buckets of members known to be there are collected and sent as one
-- ZREM per bucket by flush_unfile. unfile_later takes the bucket number as a string.
local unfiles, unfileBuckets

-- unfile_list returns the list of members collected for removal from bucket b.
local function unfile_list(b)
  if not unfiles then
    unfiles, unfileBuckets = {}, {}
  end
  return group(unfiles, unfileBuckets, b)
end

local function unfile_later(b, member, q)
  stat('s', q, -1)
  local l = unfile_list(b)
  l[#l + 1] = member
end

-- A bucket the caller knows still holds entries (keep) is not checked for emptiness.
local function flush_unfile(P, bucketsKey, keep)
  if not unfileBuckets then
    return
  end
  for _, b in ipairs(unfileBuckets) do
    local k = P .. 'due:' .. b
    local l = unfiles[b]
    for i = 1, #l, 6000 do
      redis.call('ZREM', k, unpack(l, i, math.min(i + 5999, #l)))
    end
    if b ~= keep and redis.call('EXISTS', k) == 0 then
      redis.call('ZREM', bucketsKey, b)
    end
  end
end

-- The job field 'rl' lists the due times of the job's active runs as ",d1,d2,".
-- These helpers return the new value; callers store it with their other fields.
local function rl_add(rl, due)
  if not rl or rl == '' then
    rl = ','
  end
  return rl .. due .. ','
end

local function rl_del(rl, due)
  if not rl then
    return ','
  end
  -- The common case, due is the only active run: found without building a search string.
  if #rl == #due + 2 and string.find(rl, due, 2, true) == 2 then
    return ','
  end
  local i, j = string.find(rl, ',' .. due .. ',', 1, true)
  if not i then
    return rl
  end
  return string.sub(rl, 1, i) .. string.sub(rl, j + 1)
end

local function rl_has(rl, due)
  -- Most jobs have no active run when asked (',' or nothing): no search string is built.
  return rl and #rl > 1 and string.find(rl, ',' .. due .. ',', 1, true) ~= nil
end

local function runs_active(rl)
  return rl and rl ~= '' and rl ~= ','
end

-- Job fields a definition leaves out take these defaults (see shard/jobs.go).
local function field(v, default)
  if v == false or v == nil or v == '' then
    return default
  end
  return v
end

-- ready_score orders a queue: higher priority first, then earlier due time.
local function ready_score(pri, due)
  return (9 - tonumber(field(pri, 5))) * 1e13 + tonumber(due)
end

-- PRI_DIGIT maps a priority to 9 - priority, the leading digit of a ready score.
local PRI_DIGIT = { ['0'] = '9', ['1'] = '8', ['2'] = '7', ['3'] = '6', ['4'] = '5', ['5'] = '4',
  ['6'] = '3', ['7'] = '2', ['8'] = '1', ['9'] = '0' }

-- ready_score_str is ready_score as the string ZADD takes. For a due time of 13 digits
-- (ms, from 2001 to 2286) that is the digit 9 - priority followed by the due time: no
-- number is parsed or formatted, which costs more than the rest of filing a run.
local function ready_score_str(pri, due)
  local d = PRI_DIGIT[field(pri, '5')]
  if d and type(due) == 'string' and #due == 13 then
    return d .. due
  end
  return num(ready_score(pri, due))
end

-- READY_PIN is a member of every ready set, scored +inf, that flush_ready adds first with
-- every write: like INFLIGHT_PIN (below), it keeps the set a skiplist. A listpack of
-- ready runs was searched from its start for every run a fire added (a new run sorts
-- last), a third of the cost of a fire of 64 runs. No ready score is +inf, so
-- the pin sorts after every run: claim_runs drops it when it pops fewer runs than it
-- asked for, and readers count the runs below +inf (shard.RunScoreMax). No run member
-- is like it (a run member has a ':').
local READY_PIN = '!ready-skiplist-pin!------------------------------------------------------'

-- Additions to ready sets are collected and sent as one ZADD per queue by flush_ready.
local readyAdds, readyQueues

-- ready_list returns the list (score, member, ...) collected for queue q's ready set.
local function ready_list(q)
  if not readyAdds then
    readyAdds, readyQueues = {}, {}
  end
  return group(readyAdds, readyQueues, q)
end

local function add_ready(q, pri, due, member)
  local adds = ready_list(field(q, 'default'))
  local k = #adds
  adds[k + 1], adds[k + 2] = ready_score_str(pri, due), member
end

-- flush_ready writes the collected ready runs and returns the queues that got some.
local function flush_ready(P)
  if not readyQueues then
    return {}
  end
  for _, q in ipairs(readyQueues) do
    local adds = readyAdds[q]
    stat('n', q, #adds / 2)
    local key = P .. 'ready:' .. q
    -- The pin first: a new ready set is then a skiplist from the start (READY_PIN).
    redis.call('ZADD', key, '+inf', READY_PIN, unpack(adds, 1, math.min(5998, #adds)))
    for k = 5999, #adds, 6000 do
      redis.call('ZADD', key, unpack(adds, k, math.min(k + 5999, #adds)))
    end
  end
  return readyQueues
end

-- publish_ready publishes the ready signal "<shard> <now µs>" of shard shardNo to
-- channel..q for each queue q of queues (flush_ready's), when channel is given: workers
-- waiting for those queues claim at once (shard.Keys.ReadyChannel).
local function publish_ready(channel, shardNo, nowUs, queues)
  if not channel or channel == '' then
    return
  end
  local msg = shardNo .. ' ' .. nowUs
  for _, q in ipairs(queues) do
    redis.call('PUBLISH', channel .. q, msg)
  end
end

-- A run's state is the job field 'r'..due: "st|att|dl|tok|wk|sa|ra|er" (state, attempts,
-- deliveries, token, worker, claimed at, retry at or died at, error). A run that is
-- ready for its first attempt has no field yet. The token is set only while the run is
-- in flight, so the token alone proves a claim.
local RUN_FIELDS = '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$'
-- RUNNING_FIELDS matches only a run in flight (state running, a token set) with numbers
-- for attempts and deliveries, and captures att, dl, tok, wk, sa, ra, er.
local RUNNING_FIELDS = '^running|(%d+)|(%d+)|([^|]+)|([^|]*)|([^|]*)|([^|]*)|(.*)$'

local function run_get(v)
  if not v or v == '' then
    return { st = '', att = 0, dl = 0, tok = '', wk = '', sa = '', ra = '', er = '' }
  end
  local st, att, dl, tok, wk, sa, ra, er = string.match(v, RUN_FIELDS)
  return { st = st or '', att = tonumber(att) or 0, dl = tonumber(dl) or 0, tok = tok or '',
    wk = wk or '', sa = sa or '', ra = ra or '', er = er or '' }
end

local function run_pack(r)
  return r.st .. '|' .. num(r.att) .. '|' .. num(r.dl) .. '|' .. r.tok .. '|' .. r.wk .. '|' .. r.sa .. '|' .. r.ra .. '|' .. r.er
end

-- enqueue marks run r ready and queues it, or parks it when its job is paused. The
-- caller stores run_pack(r) in the job field 'r'..due. Returns true when it will be ready.
local function enqueue(r, member, q, pri, due, jobState)
  if jobState == 'paused' then
    r.st = 'paused'
    return false
  end
  r.st = 'ready'
  add_ready(q, pri, due, member)
  return true
end

-- fire_retry makes a retry (or snoozed run) whose time has come ready, or parks it when
-- its job is paused; v is the run's field. Returns true when it will be ready.
local function fire_retry(jobKey, member, due, q, pri, st, once, v)
  local r = run_get(v)
  if r.tok ~= '' then
    -- In flight (only a claim sets a token): the entry is stale and the run is not
    -- made ready a second time.
    return false
  end
  local ready = enqueue(r, member, q, pri, due, st)
  if once and st ~= 'paused' then
    redis.call('HSET', jobKey, 'r' .. due, run_pack(r), 'st', 'ready')
  else
    redis.call('HSET', jobKey, 'r' .. due, run_pack(r))
  end
  return ready
end

-- held_runs returns the members of job id's active runs (rl) that a worker claimed
-- ahead of their start time and has not started (in flight, with a start time 'sa'
-- after now): a pause or a change of the job sends them back (the caller publishes them
-- on the hold channel, shard.Keys.HoldChannel), and the worker hands such a run back
-- unless its handler has started by then.
local function held_runs(jobKey, id, rl, now)
  local out = {}
  for due in string.gmatch(rl or '', '[^,]+') do
    local r = run_get(redis.call('HGET', jobKey, 'r' .. due))
    if r.st == 'running' and r.tok ~= '' and (tonumber(r.sa) or 0) > now then
      out[#out + 1] = id .. ':' .. due
    end
  end
  return out
end

-- new_run queues a new occurrence for its first attempt. The caller adds due to the
-- job's 'rl'. Returns its member.
local function new_run(jobID, due, q, pri)
  local member = jobID .. ':' .. due
  add_ready(q, pri, due, member)
  return member
end

-- A job's recent runs live in its field 'h': entries (which never contain a raw newline),
-- newest first, one per line: a succeeded run in a compact form (see below), any other as
-- a cjson object. hist_push returns h with entry in front, trimmed to the newest keep;
-- callers that write the job anyway store it with their other fields.
local function hist_add(h, keep, s)
  if not h or h == '' then
    return s
  end
  s = s .. '\n' .. h
  local pos, count = 0, 0
  while true do
    pos = string.find(s, '\n', pos + 1, true)
    if not pos then
      return s
    end
    count = count + 1
    if count >= keep then
      return string.sub(s, 1, pos - 1)
    end
  end
end

local function hist_push(h, keep, entry)
  if entry.o == 'succeeded' then
    -- The common case, compact and without a table encode: "due,start-due,end-due,worker,
    -- attempt" (a worker id is [A-Za-z0-9._~-], see worker.Config.ID). Short enough that
    -- a one-time job's hash stays a listpack (values of at most 64 bytes).
    local d = entry.d
    return hist_add(h, keep, num(d) .. ',' .. (entry.s and num(entry.s - d) or '') .. ',' ..
      num(entry.e - d) .. ',' .. (entry.w or '') .. ',' .. num(entry.a))
  end
  return hist_add(h, keep, cjson.encode(entry))
end

-- hist records one history entry of a job on its own (two calls).
local function hist(jobKey, keep, entry)
  redis.call('HSET', jobKey, 'h', hist_push(redis.call('HGET', jobKey, 'h'), keep, entry))
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

-- cron_floor returns the time after which a recurring job's next occurrence is filed
-- when its schedule is set again (update_job, resume_job): now, or the latest occurrence
-- the dispatcher already handled (the job field 'lf', written by fire_runs) when that is
-- later. A dispatcher fires up to its lead ahead of the due time, so the first
-- occurrence after now may be one that fired already (and is held by a worker until its
-- time): filing it again would run it twice.
local function cron_floor(now, lf)
  local t = tonumber(lf)
  if t and t > now then
    return t
  end
  return now
end

-- due_of returns the due time (ms) of a schedule sent as kind and when (see create_jobs):
-- 'at' a time, 'delay' ms after now, 'cron' candidates, the first after floor (cron_floor;
-- now when nil); nil when no cron candidate is after it.
local function due_of(kind, when, now, floor)
  if kind == 'at' then
    return tonumber(when)
  elseif kind == 'delay' then
    return now + tonumber(when)
  end
  local c = candidate(when, floor or now)
  return c and tonumber(c)
end

-- INFLIGHT_PIN is a member of every shard's inflight set, scored +inf, that claim_runs
-- adds first with every claim. Longer than Redis's zset-max-listpack-value (64 by
-- default), it makes the set a skiplist from its creation, and keeps it from ever being
-- emptied, deleted and made again as a listpack. A listpack is searched entry by entry:
-- adding a claim of 64 runs to one cost a quarter of the claim. No run member is like it
-- (a run member has a ':'), no deadline is +inf, so the reaper never takes it, and
-- readers count the set's runs by score, below +inf (shard.Store.Backlog).
local INFLIGHT_PIN = '!inflight-skiplist-pin!-------------------------------------------------'

-- def_of returns the value of definition field name among the fields between defStart
-- and defEnd of argv (create_jobs' ARGV: name, value, ...), nil when it is left out.
local function def_of(name, argv, defStart, defEnd)
  for k = defStart, defEnd, 2 do
    if argv[k] == name then
      return argv[k + 1]
    end
  end
  return nil
end

-- reset_state empties the collections the helpers above fill during a call. A script run
-- as a Redis function (see lua.Library) calls it first: its helpers are created once, when
-- the library is loaded, and outlive a call. A script run with EVAL has them fresh. The
-- forms' own collections, which create_jobs alone fills, are emptied by create_jobs
-- (plain_reset, cold_reset, packed_reset): every other call would pay for them.
local function reset_state()
  statDelta, statOrder = nil, nil
  unfiles, unfileBuckets = nil, nil
  readyAdds, readyQueues = nil, nil
end
