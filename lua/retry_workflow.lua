-- retry_workflow: run a failed or cancelled workflow again from the nodes that did not
-- succeed: those nodes' jobs wait again (a failed one leaves the dead-letter set), the
-- succeeded nodes and their results stay, and every reset node whose rule is met by its
-- succeeded parents is released at once. A reset node's run still in flight (its
-- workflow was cancelled while it ran, and its worker has not reported yet) leaves the
-- in-flight set: that worker's late report and heartbeat are refused.
--
-- A reset node starts afresh: what its new run will own goes, so that no reader takes
-- an earlier run for the new one. Its job loses its run fields ('r<due>'), 'hs' (the run
-- a fast-path success names) and its kept results ('xs', 'x<due>'); its history 'h'
-- stays, with the run 'hs' named written into it first (that entry is in no other
-- field). Its result in the workflow hash ('x:'..node) goes: until its new run succeeds
-- it has none (shard.Store.NodeResult, the API's 404), and its children's parent results
-- leave it out.
--
-- KEYS[1] dead       ZSET  dead-letter set
-- KEYS[2] inflight   ZSET  claimed runs; score = visibility deadline ms
-- ARGV[1] prefix     string  shard key prefix
-- ARGV[2] id         string  workflow id
-- ARGV[3] keep       count   history entries kept per job
-- ARGV[4] retention  ms      how long the jobs of nodes that end at once are kept
--
-- Derived keys: P..'wf:'..id, P..'wfd:'..def, P..'job:'..id..'@'..node, P..'ready:'..queue,
--               P..'stats', and the packed form's keys (a waiting node's packed job is
--               given its due time: include workflow's wf_release)
--
-- Returns: { code, state, queues }
--   code 1 retried (state 'running'), 0 nothing to retry (state says why: running or
--   succeeded), -1 no such workflow, -5 a node's job has expired (retention): node id in
--   state, -6 a scheduled instance whose definition runs or buffers another instance
--   while its overlap policy ('ov', skip or buffer_one) does not allow a second: the
--   other instances (",i1,i2,") in state
--   queues queues that received ready runs
--- @include "workflow"

local deadKey, inflightKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local wf = ARGV[2]
local keep = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])

local wk = P .. 'wf:' .. wf
local w = redis.call('HMGET', wk, 'st', 'nodes')
if not w[1] then
  return { -1, '', {} }
end
if w[1] ~= 'failed' and w[1] ~= 'cancelled' then
  return { 0, w[1], {} }
end
-- A scheduled instance obeys its definition's overlap policy against the others: a
-- retry does not start it beside a running or buffered one (unless overlap allow).
local def = string.match(wf, '^([^@]+)@')
local dk
if def then
  dk = P .. 'wfd:' .. def
  local d = redis.call('HMGET', dk, 'act', 'bf')
  local others = rl_del(d[1] or ',', wf)
  if d[2] and d[2] ~= '' and d[2] ~= wf then
    others = rl_add(others, d[2])
  end
  if runs_active(others) and (redis.call('HGET', wk, 'ov') or 'allow') ~= 'allow' then
    return { -6, others, {} }
  end
end
local now, _, nowStr = now_ms()
local reset, nodes, states = {}, {}, {}
for node in string.gmatch(w[2] or '', '[^,]+') do
  local n = wf_get(redis.call('HGET', wk, 's:' .. node))
  states[node] = n
  if n.st ~= 'succeeded' then
    if redis.call('EXISTS', P .. 'job:' .. wf .. '@' .. node) == 0 then
      return { -5, node, {} }
    end
    reset[#reset + 1] = node
  end
end
-- The reset nodes' results in the workflow hash, deleted after the loop.
local results = {}
for _, node in ipairs(reset) do
  local id = wf .. '@' .. node
  local jobKey = P .. 'job:' .. id
  -- Its dead run leaves the dead-letter set, a run in flight the in-flight set; its runs'
  -- fields, 'hs' and its kept results go (the history stays).
  local all = redis.call('HGETALL', jobKey)
  local drop = {}
  local runs = {}
  local h, hs
  for k = 1, #all, 2 do
    local f = all[k]
    if string.find(f, '^r%d') then
      runs[f] = all[k + 1]
      local r = run_get(all[k + 1])
      local member = id .. ':' .. string.sub(f, 2)
      if r.st == 'dead' and redis.call('ZREM', deadKey, member) == 1 then
        stat('d', redis.call('HGET', jobKey, 'q'), -1)
      elseif r.tok ~= '' and redis.call('ZREM', inflightKey, member) == 1 then
        stat('f', redis.call('HGET', jobKey, 'q'), -1)
      end
      drop[#drop + 1] = f
    elseif f == 'xs' or string.find(f, '^x%d') then
      drop[#drop + 1] = f
    elseif f == 'hs' then
      hs = all[k + 1]
      drop[#drop + 1] = f
    elseif f == 'h' then
      h = all[k + 1]
    end
  end
  if #drop > 0 then
    redis.call('HDEL', jobKey, unpack(drop))
  end
  redis.call('PERSIST', jobKey)
  local fields = { 'st', 'waiting', 'nx', '0', 'rl', ',' }
  -- The run 'hs' names succeeded on finish_runs' fast path, which writes no entry to 'h'
  -- ('hs' is the newest run: shard.Store.Runs puts it first): its entry goes in front.
  local d = tonumber(hs)
  local last = d and runs['r' .. hs] and run_get(runs['r' .. hs])
  if last and last.st == 'succeeded' then
    fields[#fields + 1], fields[#fields + 2] = 'h', hist_push(h, keep,
      { d = d, s = tonumber(last.sa), e = tonumber(last.ra) or now, w = last.wk, a = last.att, o = 'succeeded' })
  end
  redis.call('HSET', jobKey, unpack(fields))
  results[#results + 1] = 'x:' .. node
  local n = states[node]
  n.st, n.ok, n.bad, n.skip, n.rel, n.en, n.att = 'waiting', 0, 0, 0, '', '', ''
  for p in string.gmatch(redis.call('HGET', wk, 'p:' .. node) or '', '[^,]+') do
    if states[p].st == 'succeeded' then
      n.ok = n.ok + 1
    end
  end
  redis.call('HSET', wk, 's:' .. node, wf_pack(n))
end
for k = 1, #results, 1000 do
  redis.call('HDEL', wk, unpack(results, k, math.min(k + 999, #results)))
end
redis.call('PERSIST', wk)
redis.call('HSET', wk, 'st', 'running', 'left', #reset, 'bad', 0)
redis.call('HDEL', wk, 'en', 'hold', 'dd')
stat('w', 'retried', 1)
if def then
  redis.call('HSET', dk, 'act', rl_add(rl_del(redis.call('HGET', dk, 'act') or ',', wf), wf))
end
-- Parents before children (the submission order), so that a node that ends at once
-- (a one_failed node whose parents all succeeded) is counted by its children before
-- they are decided.
for _, node in ipairs(reset) do
  local f = 's:' .. node
  local n = wf_get(redis.call('HGET', wk, f))
  if n.st == 'waiting' then
    local d = wf_decide(n)
    if d == 'run' then
      n.st, n.rel = 'released', nowStr
      redis.call('HSET', wk, f, wf_pack(n))
      wf_release(P, wf .. '@' .. node, nowStr)
    elseif d then
      wf_end_job(P, wf .. '@' .. node, 'skipped: its rule ' .. n.rule .. ' can no longer be met', now, keep, retention)
      wf_mark(P, wk, wf, node, d, now, nowStr, keep, retention, nil)
    end
  end
end
local readied = flush_ready(P)
flush_stats(P)
return { 1, 'running', readied }
