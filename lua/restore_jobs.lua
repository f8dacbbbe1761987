-- restore_jobs: write jobs of one shard from a snapshot (as read_jobs read them) and file
-- their runs again, as the other scripts would have left them, from each job's hash:
--   the next occurrence ('nx') of a job neither paused nor finished  due bucket at 'nx'
--   a run ready for an attempt (no run field yet, or state 'ready')  ready set
--   a run that was in flight ('running')                             ready set again,
--       without using an attempt, as after a worker's hand-back (at-least-once: it may
--       have finished after the snapshot); parked instead when its job is paused
--   a run in flight when its job was cancelled ('cancelled')         dropped
--   a run waiting for a retry ('retrying')                           due bucket at its retry time
--   a dead run ('dead')                                              dead-letter set at its time of death
--   a parked ('paused') or buffered run                              no set, as before
-- The stats hash counts what is filed, as the other scripts count it (runs made ready
-- count as fired). A job whose id exists is left as it is, so running a restore again
-- adds nothing (idempotent per job); a job whose expiry time has passed is skipped.
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets
-- KEYS[2] dead     ZSET    dead-letter set; score = when the run died (ms)
-- ARGV[1] prefix   string  shard key prefix
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] n        count   jobs that follow
-- then per job:
--   id       string  job id
--   expiry   ms      when the job expires (ms since the epoch), 0 never
--   nfields  count   field/value pairs of its hash that follow
--   nfields*2 field, value ...
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats', and
--               the keys of the packed, cold and plain forms that thaw_job changes
--               (include forms)
--
-- Returns: { restored, existed, expired, wake, queues }
--   restored  jobs written; existed: left alone (the id existed); expired: skipped
--   wake      earliest due time filed (ms), -1 none
--   queues    queues that received ready runs
--- @include "forms"

local bucketsKey, deadKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local n = tonumber(ARGV[3])

local now = now_ms()
local restored, existed, expired = 0, 0, 0
local wake = -1

local function file(member, score, q)
  file_due(P, bucketsKey, bucketMs, member, score, q)
  if wake == -1 or score < wake then
    wake = score
  end
end

local i = 4
for _ = 1, n do
  local id, expiry, nfields = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local first = i + 3
  i = first + nfields * 2
  local jobKey = P .. 'job:' .. id
  if redis.call('EXISTS', jobKey) == 1 or thaw_job(P, bucketsKey, bucketMs, id) then
    existed = existed + 1
  elseif expiry > 0 and expiry <= now then
    expired = expired + 1
  else
    local f = {}
    for k = first, i - 1, 2 do
      f[ARGV[k]] = ARGV[k + 1]
    end
    local st, q, pri = f['st'], f['q'], f['pr']
    local rl = f['rl'] or ','
    for due in string.gmatch(rl, '[^,]+') do
      local member = id .. ':' .. due
      local rf = 'r' .. due
      local r = run_get(f[rf])
      if r.st == '' or r.st == 'ready' then
        add_ready(q, pri, due, member)
      elseif r.st == 'running' then
        r.att, r.tok = r.att - 1, ''
        if enqueue(r, member, q, pri, due, st) and field(f['sk'], 'at') == 'at' then
          f['st'] = 'ready'
        end
        f[rf] = run_pack(r)
      elseif r.st == 'cancelled' then
        rl = rl_del(rl, due)
        f[rf] = nil
      elseif r.st == 'retrying' then
        file(member, tonumber(r.ra) or now, q)
      end
    end
    f['rl'] = rl
    local kv = {}
    for name, v in pairs(f) do
      local k = #kv
      kv[k + 1], kv[k + 2] = name, v
      if string.find(name, '^r%d') then
        local r = run_get(v)
        if r.st == 'dead' then
          redis.call('ZADD', deadKey, num(tonumber(r.ra) or now), id .. ':' .. string.sub(name, 2))
          stat('d', q, 1)
        end
      end
    end
    local nx = tonumber(f['nx']) or 0
    if nx > 0 and st ~= 'paused' and not final(st) then
      file(id .. ':' .. num(nx), nx, q)
    end
    for k = 1, #kv, 6000 do
      redis.call('HSET', jobKey, unpack(kv, k, math.min(k + 5999, #kv)))
    end
    if expiry > 0 then
      redis.call('PEXPIREAT', jobKey, num(expiry))
    end
    restored = restored + 1
  end
end

local readied = flush_ready(P)
flush_stats(P)
return { restored, existed, expired, wake, readied }
