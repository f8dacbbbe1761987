-- extend_runs: heartbeat; push the visibility deadlines of runs a worker still holds.
--
-- KEYS[1] inflight  ZSET  claimed runs; score = visibility deadline ms (and common's INFLIGHT_PIN)
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] n         count   runs that follow
-- then per run: member, token
--
-- Derived keys: P..'job:'..id, and the packed form's keys (a run of a packed job thaws
--               the job: packed_thaw)
--
-- Returns: per run, 1 extended, 0 cancelled (the handler should stop; its deadline is
--          still extended so the cancellation is not taken for a lost worker),
--          2 its job is paused and the run was claimed ahead of a start time still to
--          come (common's held_runs): the worker hands it back unless it has started,
--          -2 the run is no longer held with this token (redelivered or finished).
--- @include "packed"

local inflightKey = KEYS[1]
local P = ARGV[1]
local n = tonumber(ARGV[2])

local now = now_ms()
local out = {}
local members = {}
for k = 1, n do
  members[k] = ARGV[1 + 2 * k]
end
local ids, runs = packed_runs(P, members)
for k, run in ipairs(runs) do
  if run and packed_in_flight(run) then
    packed_thaw(P, ids[k])
  end
end
for k = 3, 2 + n * 2, 2 do
  local member, token = ARGV[k], ARGV[k + 1]
  -- A run that leaves the inflight set loses its token, so the token alone proves it.
  local id, due = split_run(member)
  local j = redis.call('HMGET', P .. 'job:' .. id, 'vt', 'r' .. due, 'st')
  local r = run_get(j[2])
  if r.tok == '' or r.tok ~= token then
    table.insert(out, -2)
  else
    local vt = tonumber(field(j[1], 30000))
    redis.call('ZADD', inflightKey, 'XX', num(now + vt), member)
    if r.st == 'cancelled' then
      table.insert(out, 0)
    elseif j[3] == 'paused' and (tonumber(r.sa) or 0) > now then
      table.insert(out, 2)
    else
      table.insert(out, 1)
    end
  end
end
return out
