-- claim_runs: pop up to n runs from a queue's ready set, file them in the inflight set with
-- a visibility deadline and a fresh token, and return what the handler needs.
--
-- KEYS[1] ready     ZSET  the queue's ready runs; score = (9-priority)*1e13 + due
-- KEYS[2] inflight  ZSET  claimed runs; score = visibility deadline ms
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] n         count   most runs to claim
-- ARGV[3] worker    string  the claiming worker's id (recorded in history)
-- ARGV[4] nonce     string  random per worker process; part of each token
--
-- Derived keys: P..'run:'..member, P..'job:'..id
--
-- Returns: { now, runs } where runs holds, per claimed run, 8 entries: member, token,
--          attempt (1-based), type, payload, timeout ms, visibility ms, max attempts.
--- @include "common"

local readyKey, inflightKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local n = tonumber(ARGV[2])
local worker, nonce = ARGV[3], ARGV[4]

local now = now_ms()
local out = {}
local inflight = {}
local popped = redis.call('ZPOPMIN', readyKey, n)
for k = 1, #popped, 2 do
  local member = popped[k]
  local runKey = P .. 'run:' .. member
  local id = split_run(member)
  local jobKey = P .. 'job:' .. id
  local j = redis.call('HMGET', jobKey, 't', 'p', 'to', 'vt', 'ma')
  if not j[1] then
    -- Orphan (the job expired or was removed): drop it.
    redis.call('DEL', runKey)
  else
    -- A run's hash appears at its first claim; the job's state stays 'ready' while it
    -- runs (readers tell a running run from its hash).
    local r = redis.call('HMGET', runKey, 'att', 'dl')
    local att = (tonumber(r[1]) or 0) + 1
    local dl = (tonumber(r[2]) or 0) + 1
    local token = dl .. '-' .. nonce
    local vt = tonumber(field(j[4], 30000))
    redis.call('HSET', runKey, 'st', 'running', 'att', att, 'dl', dl, 'tok', token, 'wk', worker, 'sa', now)
    table.insert(inflight, now + vt)
    table.insert(inflight, member)
    table.insert(out, member)
    table.insert(out, token)
    table.insert(out, att)
    table.insert(out, j[1])
    table.insert(out, j[2] or '')
    table.insert(out, tonumber(field(j[3], 1800000)))
    table.insert(out, vt)
    table.insert(out, tonumber(field(j[5], 25)))
  end
end
if #inflight > 0 then
  redis.call('ZADD', inflightKey, unpack(inflight))
end

return { now, out }
