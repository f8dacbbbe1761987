-- claim_runs: pop up to n runs from a queue's ready set, file them in the inflight set with
-- a visibility deadline and a fresh token, and return what the handler needs.
--
-- KEYS[1] ready     ZSET  the queue's ready runs; score = (9-priority)*1e13 + due (and
--                         common's READY_PIN)
-- KEYS[2] inflight  ZSET  claimed runs; score = visibility deadline ms (and common's INFLIGHT_PIN)
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] n         count   most runs to claim
-- ARGV[3] worker    string  the claiming worker's id (recorded in history)
-- ARGV[4] nonce     string  random per worker process; part of each token
-- ARGV[5] queue     string  the queue of KEYS[1], for the in-flight count
-- ARGV[6] nowmax    count   most of the n runs that may start now ('' or 0: n, < 0:
--                           none); the others must be runs fired ahead of their start
--                           time (the dispatcher's lead), which the worker holds until
--                           then without a handler slot. The claim stops at the first
--                           run, in the set's order, that does not fit
-- ARGV[7] noahead   flag    optional; '1': only runs that start now may be taken (for
--                           workers that cannot hold a run until its start, such as
--                           the HTTP API's): the claim stops at the first run, in the
--                           set's order, fired ahead of its start time. Absent or '':
--                           as nowmax says
--
-- Derived keys: P..'job:'..id, P..'stats', and the packed form's keys (include packed)
--
-- Returns: { now, runs, now_us, first_token, more[, targets] } where runs holds, per claimed run in
--          claim order, either 2 entries for a run of a packed job (include packed;
--          always a first attempt): its member and the job's packed value; or 5 for any
--          other: '' (no member is empty), member, type, payload, and rest: '' for a
--          first attempt whose job keeps the default timeout, visibility and max
--          attempts, else "token|attempt|timeout ms|visibility ms|max attempts|start
--          ms", a default left empty; start is the retry time of a retry fired ahead of
--          it (the dispatcher fires up to its lead early), else empty. A first attempt's
--          token is first_token, the same for every first attempt of the call.
--          Every value returned costs Redis about as much as a field read. now_us is now
--          in microseconds (a string), which orders the claim against ready signals.
--          more is 1 when runs may be left (the claim took n entries, or stopped at one
--          that did not fit nowmax or noahead), 0 when the set is empty. targets, only
--          when a run of a job hash is a push run (type '@push'), holds per such run its
--          member and the job's target (field tg); a packed value holds its job's.
--- @include "packed"

local readyKey, inflightKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local n = tonumber(ARGV[2])
local worker, nonce = ARGV[3], ARGV[4]
local noAhead = ARGV[7] == '1'

local now, nowUs, nowStr = now_ms()
local out = {}
-- A first attempt gets the same token in every run of the call.
local firstTok = '1-' .. nonce
-- Runs that start now (not fired ahead) left to take.
local nowLeft = tonumber(ARGV[6] ~= nil and ARGV[6] ~= '' and ARGV[6] or '0')
if nowLeft == 0 then
  nowLeft = n
elseif nowLeft < 0 then
  nowLeft = 0
  -- Only runs fired ahead may be taken: when the set's first run starts now (due by now,
  -- and no retry time after now), the claim stops before reading the n runs.
  local head = redis.call('ZRANGE', readyKey, '0', '0')[1]
  if not head or head == READY_PIN then
    return { now, out, nowUs, firstTok, 0 }
  end
  local hid, hdue = split_run(head)
  if later_ms(hdue, nowStr) == nowStr then
    local rv = redis.call('HGET', P .. 'job:' .. hid, 'r' .. hdue)
    if later_ms(nowStr, rv and run_get(rv).ra or '') == nowStr then
      return { now, out, nowUs, firstTok, 1 }
    end
  end
end
-- The pin first: a new inflight set is then a skiplist from the start (common's INFLIGHT_PIN).
local inflight = { '+inf', INFLIGHT_PIN }
-- ZRANGE and ZREMRANGEBYRANK rather than ZPOPMIN, whose scores Redis would format with
-- printf only for this script to drop them.
local popped = redis.call('ZRANGE', readyKey, '0', num(n - 1))
-- Fewer runs than asked for: the last member is the set's pin (common's READY_PIN).
local more = 1
if popped[#popped] == READY_PIN then
  popped[#popped] = nil
  more = 0
elseif #popped < n then
  more = 0
end
if #popped == 0 then
  return { now, out, nowUs, firstTok, 0 }
end
-- Entries walked, in order: taken, or dropped as orphans. They leave the set by rank.
local walked = #popped
-- A first attempt of a job hash (no run field yet) gets the same field value in every
-- run of the call, and one of a packed job that is due by now the same state: built once.
local firstRun = 'running|1|1|' .. firstTok .. '|' .. worker .. '|' .. nowStr .. '||'
local runHead, runTail = packed_running(firstTok, worker, ARGV[5])
local packedRun = runHead .. nowStr .. runTail
-- The deadline of the default visibility timeout (job.DefaultVisibility, 30 s), and of
-- the others met, formatted once each.
local defDeadline = num(now + 30000)
local deadlines = {}
local ni, no = 2, 0
-- Push runs of job hashes: member, target (the executor's; read only for them).
local targets, nt = nil, 0

-- file_inflight adds member to the in-flight entries with the deadline of visibility
-- timeout vt (ms, a string; nil or false the default).
local function file_inflight(member, vt)
  local deadline = defDeadline
  if vt then
    deadline = deadlines[vt]
    if not deadline then
      deadline = num(now + tonumber(vt))
      deadlines[vt] = deadline
    end
  end
  inflight[ni + 1], inflight[ni + 2] = deadline, member
  ni = ni + 2
end
-- The packed jobs among the runs' jobs, read at once.
local ids, dues = {}, {}
local match = string.match
for k, member in ipairs(popped) do
  ids[k], dues[k] = match(member, '^([^:]*):(.*)$') -- split_run, inlined
end
local packed = packed_values(P, ids)
local runAdds, nr = {}, 0
-- The packed runs' work, the most common, inlined: each Lua function call costs more
-- than the few table writes of a run.
local byte, nowLen = string.byte, #nowStr
for k, member in ipairs(popped) do
  local id, due = ids[k], dues[k]
  local pv = packed[k]
  if pv then
    -- A run due by now starts now: its state is the call's shared value.
    if #due < nowLen or (#due == nowLen and due <= nowStr) then
      if nowLeft == 0 then
        walked, more = k - 1, 1
        break
      end
      nowLeft = nowLeft - 1
      runAdds[nr + 1], runAdds[nr + 2] = id, packedRun
    else
      if noAhead then
        walked, more = k - 1, 1
        break
      end
      runAdds[nr + 1], runAdds[nr + 2] = id, runHead .. due .. runTail
    end
    nr = nr + 2
    -- The value's visibility timeout (packed's packed_vt, inlined: a call per run, or a
    -- table of them made in one call, cost 2-3% of a claim).
    local b14, b15 = byte(pv, 14, 15)
    if b14 == 124 and b15 == 124 then
      inflight[ni + 1], inflight[ni + 2] = defDeadline, member
      ni = ni + 2
    else
      file_inflight(member, packed_vt(pv))
    end
    out[no + 1], out[no + 2] = member, pv
    no = no + 2
  else
    local jobKey = P .. 'job:' .. id
    local rf = 'r' .. due
    -- A payload of up to 8 x 64 bytes is stored in chunks p, p1, ... p7 (shard/jobs.go); a
    -- chunk after p1 exists only when p1 is full, so most claims read two chunks at most.
    local j = redis.call('HMGET', jobKey, 't', 'p', 'p1', 'to', 'vt', 'ma', rf)
    -- A run starts now unless it is due, or its retry is, after now (fired ahead).
    local r = j[7] and j[7] ~= '' and run_get(j[7])
    local startsNow = later_ms(later_ms(due, nowStr), r and r.ra or '') == nowStr
    if j[1] and (startsNow and nowLeft == 0 or noAhead and not startsNow) then
      walked, more = k - 1, 1
      break
    end
    -- An orphan (its job expired or was removed) is dropped.
    if j[1] then
      if startsNow then
        nowLeft = nowLeft - 1
      end
      local payload = j[2] or ''
      if j[3] then
        payload = payload .. j[3]
        if #j[3] == 64 then
          local chunks = redis.call('HMGET', jobKey, 'p2', 'p3', 'p4', 'p5', 'p6', 'p7')
          local parts = { payload }
          for c = 1, 6 do
            if not chunks[c] then
              break
            end
            parts[c + 1] = chunks[c]
          end
          payload = table.concat(parts)
        end
      end
      -- The job's state stays 'ready' while a one-time run runs (readers tell a running
      -- run from its field).
      local rest = ''
      if r then
        r.st, r.att, r.dl = 'running', r.att + 1, r.dl + 1
        -- A run fired ahead of its due time (the dispatcher's lead) records as its start
        -- the time the worker will start it; a retry or snoozed run starts no sooner than
        -- its retry time.
        local start = later_ms(later_ms(due, nowStr), r.ra)
        r.tok, r.wk, r.sa = num(r.dl) .. '-' .. nonce, worker, start
        redis.call('HSET', jobKey, rf, run_pack(r))
        rest = r.tok .. '|' .. num(r.att) .. '|' .. (j[4] or '') .. '|' .. (j[5] or '') .. '|' .. (j[6] or '') .. '|' .. (start ~= nowStr and start or '')
      else
        if later_ms(due, nowStr) == nowStr then
          redis.call('HSET', jobKey, rf, firstRun)
        else
          redis.call('HSET', jobKey, rf, 'running|1|1|' .. firstTok .. '|' .. worker .. '|' .. due .. '||')
        end
        if j[4] or j[5] or j[6] then
          rest = firstTok .. '|1|' .. (j[4] or '') .. '|' .. (j[5] or '') .. '|' .. (j[6] or '') .. '|'
        end
      end
      file_inflight(member, j[5])
      if j[1] == '@push' then
        targets = targets or {}
        targets[nt + 1], targets[nt + 2] = member, redis.call('HGET', jobKey, 'tg') or ''
        nt = nt + 2
      end
      -- Numbers go back as the strings they are stored as; the caller parses them.
      out[no + 1], out[no + 2], out[no + 3], out[no + 4], out[no + 5] = '', member, j[1], payload, rest
      no = no + 5
    end
  end
end
if walked > 0 then
  redis.call('ZREMRANGEBYRANK', readyKey, '0', num(walked - 1))
end
if nr > 0 then
  packed_set_runs(P, runAdds)
end
if ni > 2 then
  redis.call('ZADD', inflightKey, unpack(inflight))
  stat('f', ARGV[5], ni / 2 - 1)
  flush_stats(P)
end

if targets then
  return { now, out, nowUs, firstTok, more, targets }
end
return { now, out, nowUs, firstTok, more }
