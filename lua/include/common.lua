-- common: helpers shared by the shard scripts. Included with `--- @include "common"`.
--
-- Key layout (P is the shard prefix `<ns>:v1:{<tag>}:`; see shard/keys.go):
--   P..'job:'..id      HASH  job definition and state
--   job field 'r'..due       one run of the job (see run_get); member = id..':'..due_ms
--   P..'due:'..bucket  ZSET  runs due in one bucket; score = when they become ready (ms)
--   P..'ready:'..queue ZSET  ready runs; score = (9-priority)*1e13 + due_ms (and READY_PIN)
--   job field 'h'            recent runs of a job: cjson entries, newest first, one per line
--   job field 'hs'           the due time of a one-time job's run that succeeded on the
--                            ack's fast path: its entry, newest of all, is not in 'h' but
--                            read from its run field (shard.Store.Runs)
--   P..'stats'         HASH  per-queue counts: 's:'..q scheduled (in due buckets or cold), 'f:'..q
--                            in flight, 'd:'..q dead, 'n:'..q runs made ready since creation
-- Cold jobs (one-time jobs due further ahead than the store's ColdAfter when created; see
-- cold_record), packed to a fraction of a job hash's memory until they are thawed:
--   P..'cold'          ZSET  buckets with a pack; score = the bucket's start (ms)
--   P..'pack:'..bucket LIST  cold records of the jobs due in the bucket
--   P..'jobs:'..slot   HASH  cold job id -> its pack's bucket (slot: cold_index)

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

-- PRI_BYTE_DIGIT is PRI_DIGIT by the byte of the priority's digit ('0' is 48). Written
-- out rather than built from PRI_DIGIT: a function library's load-time code cannot call
-- pairs (FUNCTION LOAD fails with "nonexistent global variable 'pairs'").
local PRI_BYTE_DIGIT = { [48] = '9', [49] = '8', [50] = '7', [51] = '6', [52] = '5', [53] = '4',
  [54] = '3', [55] = '2', [56] = '1', [57] = '0' }

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
-- asked for, and readers count the runs below +inf (shard.RunScoreMax). Its ':0' makes
-- it the run of a job that does not exist (job ids have no '!') to a claim_runs of an
-- earlier version, which drops it as an orphan.
local READY_PIN = '!ready-skiplist-pin!----------------------------------------------------:0'

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

-- cold_index returns the key of the hash that holds cold job id's pack: one of
-- COLD_SLOTS per shard, so that each stays a small listpack.
local COLD_SLOTS = 1024
local function cold_index(P, id)
  return P .. 'jobs:' .. num(tonumber(string.sub(redis.sha1hex(id), 1, 6), 16) % COLD_SLOTS)
end

-- lengthStrs caches the strings of the lengths cold_record writes (most are short and
-- recur: a type's name, a payload's size); formatting one costs as much as the rest of
-- a definition field.
local lengthStrs = {}
local function length_str(n)
  local s = lengthStrs[n]
  if not s then
    s = num(n)
    if n < 1024 then
      lengthStrs[n] = s
    end
  end
  return s
end

-- cold_record packs what create_jobs would write for a scheduled one-time job into one
-- string: "id|offset|age|dh|k" then name=len:value per definition field, where offset is
-- due - bucketStart (the start of its bucket, ms), age is due - created, and k tells how the field 'sv'
-- follows ('@': "@"..due, '+': "+"..age, '.': stored). A payload split into chunks
-- (shard/jobs.go appendPayload) is stored joined as 'p'. The fields between defStart and
-- defEnd of argv (the script's ARGV: a function's helpers cannot see it) are name,
-- value, ...
local function cold_record(id, due, dueStr, bucketStart, now, dh, argv, defStart, defEnd)
  -- A packed job's record (bucket start 0, age 0) needs no number formatted.
  local age = now == due and '0' or num(due - now)
  local parts = { id, '|', bucketStart == 0 and dueStr or num(due - bucketStart), '|', age, '|', dh, '|', '.' }
  local np = 9
  local payload
  for k = defStart, defEnd, 2 do
    local f, v = argv[k], argv[k + 1]
    if f == 'sv' then
      if v == '@' .. dueStr then
        parts[9] = '@'
      elseif v == '+' .. age then
        parts[9] = '+'
      else
        parts[np + 1], parts[np + 2] = 'sv=' .. length_str(#v) .. ':', v
        np = np + 2
      end
    elseif f == 'p' or (#f == 2 and string.byte(f) == 112 and string.byte(f, 2) <= 57) then
      -- A payload chunk: p, p1 … p7 (the field names that start with p are those and pr;
      -- '9' is 57, 'r' 114).
      payload = payload and payload .. v or v
    else
      parts[np + 1], parts[np + 2] = f .. '=' .. length_str(#v) .. ':', v
      np = np + 2
    end
  end
  if payload then
    parts[np + 1], parts[np + 2] = 'p=' .. length_str(#payload) .. ':', payload
  end
  return table.concat(parts)
end

-- cold_fields unpacks a cold record of bucket b (a number) into the job id, the due time
-- (a string) and the job hash's fields (HGETALL's form: name, value, ...). The offset and
-- age may be negative: a packed job's offset is its due time, and binaries that did not
-- check job.MinAt accepted one-time jobs due before 1970.
local function cold_fields(rec, b, bucketMs)
  local id, off, age, dh, k, pos = string.match(rec, '^([^|]*)|(-?%d+)|(-?%d+)|([^|]*)|(.)()')
  local due = b * bucketMs + tonumber(off)
  local dueStr = num(due)
  local f = { 'st', 'scheduled', 'nx', dueStr, 'cr', num(due - tonumber(age)), 'dh', dh, 'rl', ',' }
  if k == '@' then
    f[11], f[12] = 'sv', '@' .. dueStr
  elseif k == '+' then
    f[11], f[12] = 'sv', '+' .. age
  end
  while pos <= #rec do
    local name, len, at = string.match(rec, '^([^=]*)=(%d+):()', pos)
    pos = at + tonumber(len)
    local v = string.sub(rec, at, pos - 1)
    if name == 'p' and #v <= 512 then
      -- Chunked again as shard/jobs.go stores a payload of up to 8 x 64 bytes.
      for c = 0, math.floor((#v - 1) / 64) do
        f[#f + 1], f[#f + 2] = c == 0 and 'p' or 'p' .. c, string.sub(v, c * 64 + 1, c * 64 + 64)
      end
    else
      f[#f + 1], f[#f + 2] = name, v
    end
  end
  return id, dueStr, f
end

-- cold_find returns cold job id's record and its pack's bucket (a string), or nil.
local function cold_find(P, id)
  local b = redis.call('HGET', cold_index(P, id), id)
  if not b then
    return nil
  end
  local prefix = id .. '|'
  for _, rec in ipairs(redis.call('LRANGE', P .. 'pack:' .. b, '0', '-1')) do
    if string.sub(rec, 1, #prefix) == prefix then
      return rec, b
    end
  end
  return nil
end

-- Packed jobs: a one-time job that is not cold is kept as one value in a hash of its
-- shard, not as a job hash, for as long as only a fire, a claim and a successful ack
-- touch it: each reads the values of all the runs of its call with one HMGET and writes
-- their states with one HSET, where job hashes cost a read and a write per run. Any
-- other change (cancel, pause, update, trigger, a failed attempt, a hand-back, a reaped
-- or extended run, a create of the same id, a restore) unpacks the job into the job hash
-- it stands for (unpack_job), and from then on it is an ordinary job. Its run is filed
-- in the due buckets and sets as a job hash's is.
--   P..'jobs:packed'  HASH  id -> "cr|vt|q|pr|"..cold_record (bucket start 0, age 0): the
--                           time it was created, its visibility timeout ('' default), queue
--                           and priority (read without walking the fields), and its
--                           definition
--   P..'runs:packed'  HASH  id -> its run's state: none while it is scheduled or ready
--                           (its member is in a due bucket or in its queue's ready set:
--                           packed_fields tells which), "R|token|worker|start|queue"
--                           while its first attempt runs, "C|token|worker|start|queue|
--                           end|expiry" once it succeeded (times in ms); "F" (ready) is
--                           no longer written (it cost a fire 3,000 of its 26,000
--                           instructions per run), but a namespace written before may
--                           hold it
--   both hashes also hold the field '' (as_table)
--   P..'expiry'       ZSET  expiry buckets of succeeded packed jobs; score = bucket end
--   P..'expiry:'..b   LIST  ids of the packed jobs that expire in bucket b (fire_due
--                           deletes them once their expiry has passed)
local PACKED, PACKED_RUNS = 'jobs:packed', 'runs:packed'

-- Plain runs are the scheduled runs of packed jobs (PACKED): create_jobs files them in
-- a sorted set of their shard per priority and queue instead of a due bucket, scored by
-- due time (ms) as in a bucket. fire_due makes them ready without reading their jobs: a
-- member of such a set is always a plain run, so its queue and ready score follow from
-- the set and the member's name. Whatever makes the job something else unpacks it first,
-- and unpack_job moves the run to its due bucket. A set per priority and queue rather
-- than per bucket: packed jobs are due within the store's ColdAfter (later ones are
-- cold), and a set is read from its start, like a bucket.
--   P..'plain:'..pri..':'..q  ZSET  member id..':'..due of a plain run of priority pri
--                                   (one digit) and queue q; score = due ms
--   P..'plains'               ZSET  member pri..':'..q of a plain set; score = at most
--                                   the due time of its first run: create_jobs lowers it
--                                   to the runs it files (ZADD LT), fire_due sets it to
--                                   the set's first after taking runs, or drops the name
--                                   of an emptied set. unpack_job's removals may leave it
--                                   lower than that (fire_due then visits the set for
--                                   nothing and corrects it), never higher: a dispatcher
--                                   that sleeps until the index's first wakes in time.
local PLAIN, PLAINS = 'plain:', 'plains'

-- shard_earliest returns the earliest due time the shard holds (ms; nil when none): of
-- its due buckets (index bucketsKey) and of the plain sets' index (PLAINS, which may be
-- earlier than the runs: the dispatcher then wakes no later than that). A script that
-- files a run earlier than it signals the dispatcher to wake.
local function shard_earliest(P, bucketsKey)
  local earliest = nil
  local firstBucket = redis.call('ZRANGE', bucketsKey, '0', '0')
  if firstBucket[1] then
    local first = redis.call('ZRANGE', P .. 'due:' .. firstBucket[1], '0', '0', 'WITHSCORES')
    if first[2] then
      earliest = tonumber(first[2])
    end
  end
  local firstPlain = redis.call('ZRANGE', P .. PLAINS, '0', '0', 'WITHSCORES')
  if firstPlain[2] and (not earliest or tonumber(firstPlain[2]) < earliest) then
    earliest = tonumber(firstPlain[2])
  end
  return earliest
end

-- plain_set returns the name (pri..':'..q) of the plain set of a packed job's priority
-- and queue as stored ('' for the default).
local function plain_set(pri, q)
  return field(pri, '5') .. ':' .. field(q, 'default')
end

-- INFLIGHT_PIN is a member of every shard's inflight set, scored +inf, that claim_runs
-- adds first with every claim. Longer than Redis's zset-max-listpack-value (64 by
-- default), it makes the set a skiplist from its creation, and keeps it from ever being
-- emptied, deleted and made again as a listpack. A listpack is searched entry by entry:
-- adding a claim of 64 runs to one cost a quarter of the claim. No run member is like it
-- (a run member has a ':'), no deadline is +inf, so the reaper never takes it, and
-- readers count the set's runs by score, below +inf (shard.Store.Backlog).
local INFLIGHT_PIN = '!inflight-skiplist-pin!-------------------------------------------------'

-- as_table returns a field no job id can be ('') and a value longer than Redis's
-- hash-max-listpack-value (64 by default), which create_jobs writes to both hashes: a
-- hash with it is a hash table from then on. A small hash would otherwise be a listpack,
-- whose fields are searched one by one, and a claim or an ack looks up many at once. A
-- server configured with values longer than 256 keeps small hashes listpacks: slower,
-- no less correct. Listings skip the field (shard.Store.scanPacked). The value is made
-- at the first call: a library's top level cannot reach the string library.
local asTableValue
local function as_table()
  if not asTableValue then
    asTableValue = string.rep('~', 256)
  end
  return '', asTableValue
end

-- packed_fields returns the job hash fields (HGETALL's form) that packed job id of
-- shard prefix P, stored as value v with run state run (nil or false while scheduled
-- or ready), stands for, its expiry time (ms, -1 none) and its run's due time (the
-- string of its member); nil when it has expired.
local function packed_fields(P, id, v, run, now)
  local cr, q, rec = string.match(v, '^(%d+)|%d*|([^|]*)|%d*|(.*)$')
  -- Packed with bucket start 0: the offset is the due time. Scheduled as read.
  local _, dueStr, f = cold_fields(rec, 0, 1)
  f[6] = cr
  -- Without a run state, its run is ready when fire_due moved it to its ready set.
  if not run and not redis.call('ZSCORE', P .. 'ready:' .. (q == '' and 'default' or q), id .. ':' .. dueStr) then
    return f, -1, dueStr
  end
  f[2], f[4], f[10] = 'ready', '0', ',' .. dueStr .. ','
  if not run or run == 'F' then
    return f, -1, dueStr
  end
  local rf = 'r' .. dueStr
  local tok, wk, start = string.match(run, '^R|([^|]*)|([^|]*)|([^|]*)|')
  if tok then
    f[#f + 1], f[#f + 2] = rf, 'running|1|1|' .. tok .. '|' .. wk .. '|' .. start .. '||'
    return f, -1, dueStr
  end
  local wk2, start2, stop, exp = string.match(run, '^C|[^|]*|([^|]*)|([^|]*)|[^|]*|(%d+)|(%d+)$')
  if not exp or tonumber(exp) <= now then
    return nil
  end
  -- As finish_runs' fast path leaves a succeeded one-time job.
  f[2], f[10] = 'completed', ','
  f[#f + 1], f[#f + 2] = rf, 'succeeded|1|1||' .. wk2 .. '|' .. start2 .. '|' .. stop .. '|'
  f[#f + 1], f[#f + 2] = 'hs', dueStr
  return f, tonumber(exp), dueStr
end

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

-- unpack_job makes packed job id an ordinary one: the job hash it stands for, with the
-- expiry of a succeeded one; its run stays where it is filed (due bucket, ready or
-- inflight set), except a plain run (PLAIN), which moves to its due bucket (of index
-- bucketsKey and width bucketMs). A caller whose packed jobs' runs are all in flight
-- (a heartbeat, a worker's outcome) may leave both out. A packed job whose expiry has
-- passed is deleted. Returns true when it was packed (and has not expired). Costs one
-- HGET when it was not.
local function unpack_job(P, id, bucketsKey, bucketMs)
  local v = redis.call('HGET', P .. PACKED, id)
  if not v then
    return false
  end
  local run = redis.call('HGET', P .. PACKED_RUNS, id)
  -- Decoded before anything is deleted: a script that fails on a value it cannot read
  -- is not rolled back, and must not have lost the job.
  local f, exp, dueStr = packed_fields(P, id, v, run, now_ms())
  redis.call('HDEL', P .. PACKED, id)
  if run then
    redis.call('HDEL', P .. PACKED_RUNS, id)
  end
  if not f then
    return false
  end
  local jobKey = P .. 'job:' .. id
  redis.call('HSET', jobKey, unpack(f))
  if exp > 0 then
    redis.call('PEXPIREAT', jobKey, num(exp))
  end
  -- A scheduled run (no run state) may be a plain one: filed as a job hash's is.
  if bucketMs and not run then
    local member = id .. ':' .. dueStr
    local q, pri = string.match(v, '^%d+|%d*|([^|]*)|(%d*)|')
    if redis.call('ZREM', P .. PLAIN .. plain_set(pri, q), member) == 1 then
      local b = math.floor(tonumber(dueStr) / bucketMs)
      redis.call('ZADD', P .. 'due:' .. num(b), dueStr, member)
      redis.call('ZADD', bucketsKey, num(b * bucketMs), num(b))
    end
  end
  return true
end

-- thaw_cold makes cold job id an ordinary one: a job hash with its due run filed, as
-- create_jobs would have written (its count in the stats was made when it was created).
-- Returns true when it was cold. Costs one HGET when not.
local function thaw_cold(P, bucketsKey, bucketMs, id)
  local rec, b = cold_find(P, id)
  if not rec then
    return false
  end
  redis.call('HDEL', cold_index(P, id), id)
  redis.call('LREM', P .. 'pack:' .. b, '1', rec)
  local bn = tonumber(b)
  local _, dueStr, f = cold_fields(rec, bn, bucketMs)
  redis.call('HSET', P .. 'job:' .. id, unpack(f))
  redis.call('ZADD', P .. 'due:' .. b, dueStr, id .. ':' .. dueStr)
  redis.call('ZADD', bucketsKey, num(bn * bucketMs), b)
  return true
end

-- thaw_job makes cold or packed job id an ordinary one, so that a script may change it
-- (unpack_job, thaw_cold). Returns true when it was cold or packed. Costs two HGETs when
-- not.
local function thaw_job(P, bucketsKey, bucketMs, id)
  return unpack_job(P, id, bucketsKey, bucketMs) or thaw_cold(P, bucketsKey, bucketMs, id)
end

-- packed_runs returns the job ids of run members and their packed run states (false for
-- none), read at once.
local function packed_runs(P, members)
  local ids, match = {}, string.match
  for k, m in ipairs(members) do
    ids[k] = match(m, '^([^:]*)')
  end
  if #ids == 0 then
    return ids, {}
  end
  return ids, redis.call('HMGET', P .. PACKED_RUNS, unpack(ids))
end

-- reset_state empties the collections the helpers above fill during a call. A script
-- run as a Redis function (see lua.Library) calls it first: its helpers are created once,
-- when the library is loaded, and outlive a call. A script run with EVAL has them fresh.
local function reset_state()
  statDelta, statOrder = nil, nil
  unfiles, unfileBuckets = nil, nil
  readyAdds, readyQueues = nil, nil
end
