-- restore_workflows: write workflows of one shard from a snapshot (as read_workflows read
-- them), each with its nodes' jobs, in one step per call, so that no run of a node ends
-- before its workflow is there to count it. The nodes' jobs are written and their runs
-- filed as restore_jobs files a job's (include restore): a node waiting for its parents
-- stays waiting, a released node's run is ready, a node's run in flight is ready again
-- without using an attempt. The workflow hash is written as it was (its nodes' states,
-- rules, counts and results), with its expiry time.
--
-- A scheduled workflow's instance (id def..'@'..due) that is running joins its
-- definition's hash P..'wfd:'..def, which snapshots do not hold: a held one (overlap
-- buffer_one, 'hold') becomes the buffered instance 'bf'; when one is buffered already the
-- later of the two (by due time) stays buffered and the earlier starts (in the exported
-- namespace it had started: the snapshot read the two at different moments); any other
-- joins the running instances 'act'. settle_definitions then starts a buffered instance
-- that no running one is left to start.
--
-- An ended workflow's count of nodes whose runs are dead ('dd', include workflow: it has
-- no expiry while there are any) is counted again from its nodes' jobs as the restore
-- left them (wf_dead_count), not taken from the record: one whose node's job did not
-- come back dead (missing from the record, or a job of its id found) would otherwise
-- never expire, and one whose record kept no count (an earlier build's) would expire
-- while its node's run is dead. Without dead runs it keeps the record's expiry, or
-- expires `retention` from now when the record had none.
--
-- A workflow whose id exists is left as it is, with its nodes (a restore run again adds
-- nothing); one whose expiry time has passed is skipped, with its nodes.
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets
-- KEYS[2] dead     ZSET    dead-letter set; score = when the run died (ms)
-- ARGV[1] prefix   string  shard key prefix
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] retention ms     how long an ended workflow is kept once no node's run is dead
-- ARGV[4] n        count   workflows that follow
-- then per workflow:
--   id        string  workflow id
--   expiry    ms      when the workflow hash expires (ms since the epoch), 0 never
--   nfields   count   field/value pairs of its hash that follow
--   nfields*2 field, value ...
--   nnodes    count   node jobs that follow, each as restore_jobs takes a job:
--     id, expiry, nfields, nfields*2 field, value ...
--
-- Derived keys: P..'wf:'..id, P..'wfd:'..def, P..'job:'..id..'@'..node, P..'due:'..bucket,
--               P..'ready:'..queue, P..'stats', and the keys of the packed, cold and plain
--               forms that thaw_job changes (include forms)
--
-- Returns: { restored, existed, expired, nodes restored, nodes existed, nodes expired,
--            wake, queues }
--   restored  workflows written; existed: left alone (the id existed); expired: skipped
--   nodes *   the same for the node jobs of the workflows written
--   wake      earliest due time filed (ms), -1 none
--   queues    queues that received ready runs
--- @include "restore"
--- @include "workflow"

local bucketsKey, deadKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local retention = ARGV[3]
local n = tonumber(ARGV[4])

local now, _, nowStr = now_ms()
local wfs = { restored = 0, existed = 0, expired = 0 }
local nodes = { restored = 0, existed = 0, expired = 0 }
local wake = -1

-- instance_due returns the due time of an instance id def..'@'..due.
local function instance_due(wf)
  return tonumber(string.match(wf, '@(%d+)$')) or 0
end

-- join_definition files running instance wf (hash wk) with its definition def.
local function join_definition(wk, wf, def, held)
  local dk = P .. 'wfd:' .. def
  local d = redis.call('HMGET', dk, 'act', 'bf')
  local act, bf = d[1] or ',', d[2] or ''
  if not held then
    redis.call('HSET', dk, 'act', rl_add(rl_del(act, wf), wf), 'bf', bf)
  elseif bf == '' or bf == wf then
    redis.call('HSET', dk, 'act', act, 'bf', wf)
  elseif instance_due(bf) < instance_due(wf) then
    wf_hold_release(P, P .. 'wf:' .. bf, bf, nowStr)
    redis.call('HSET', dk, 'act', rl_add(rl_del(act, bf), bf), 'bf', wf)
  else
    wf_hold_release(P, wk, wf, nowStr)
    redis.call('HSET', dk, 'act', rl_add(rl_del(act, wf), wf), 'bf', bf)
  end
end

local i = 5
for _ = 1, n do
  local wf, expiry, nfields = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local first = i + 3
  local last = first + nfields * 2 - 1
  local nn = tonumber(ARGV[last + 1])
  i = last + 2
  local wk = P .. 'wf:' .. wf
  local what
  if redis.call('EXISTS', wk) == 1 then
    what = 'existed'
  elseif expiry > 0 and expiry <= now then
    what = 'expired'
  else
    what = 'restored'
  end
  for _ = 1, nn do
    local id, nexp, nf = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local nfirst = i + 3
    i = nfirst + nf * 2
    if what == 'restored' then
      local f = {}
      for k = nfirst, i - 1, 2 do
        f[ARGV[k]] = ARGV[k + 1]
      end
      local got, w = restore_job(P, bucketsKey, deadKey, bucketMs, now, id, nexp, f)
      nodes[got] = nodes[got] + 1
      if w ~= -1 and (wake == -1 or w < wake) then
        wake = w
      end
    end
  end
  wfs[what] = wfs[what] + 1
  if what == 'restored' then
    local st, hold = nil, false
    for k = first, last, 2 do
      if ARGV[k] == 'st' then
        st = ARGV[k + 1]
      elseif ARGV[k] == 'hold' then
        hold = ARGV[k + 1] == '1'
      end
    end
    for k = first, last, 6000 do
      redis.call('HSET', wk, unpack(ARGV, k, math.min(k + 5999, last)))
    end
    if expiry > 0 then
      redis.call('PEXPIREAT', wk, num(expiry))
    end
    if st ~= 'running' then
      local dead = st ~= 'succeeded' and wf_dead_count(P, wk, wf) or 0
      if dead > 0 then
        redis.call('HSET', wk, 'dd', dead)
        redis.call('PERSIST', wk)
      else
        redis.call('HDEL', wk, 'dd')
        if expiry <= 0 then
          redis.call('PEXPIRE', wk, retention)
        end
      end
    end
    local def = string.match(wf, '^([^@]+)@')
    if def and st == 'running' then
      join_definition(wk, wf, def, hold)
    end
  end
end

local readied = flush_ready(P)
flush_stats(P)
return { wfs.restored, wfs.existed, wfs.expired, nodes.restored, nodes.existed, nodes.expired, wake, readied }
