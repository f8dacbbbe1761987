-- create_workflow: store a workflow and its nodes' jobs, and release its roots.
--
-- KEYS[1] workflow  HASH    P..'wf:'..id (include workflow describes it)
-- ARGV[1] prefix    string  shard key prefix
-- ARGV[2] id        string  workflow id
-- ARGV[3] dh        string  definition hash (stored as 'dh'; compared by the caller)
-- ARGV[4] def       string  scheduled instance: its definition's id; '' for a workflow
--                           created on its own
-- ARGV[5] overlap   'allow' | 'skip' | 'buffer_one'  a scheduled instance's overlap
--                           policy against its definition's running instances
-- ARGV[6] pack      '1' | '0'  whether the nodes' jobs are stored packed (include packed),
--                           as create_jobs stores a one-time job
-- ARGV[7] n         count   nodes that follow, parents before children
-- then per node:
--   node      string  node id
--   rule      string  all_success | all_done | one_success | one_failed | none_failed
--   parents   string  parent node ids, comma separated ('' a root)
--   children  string  child node ids, comma separated
--   dh        string  the node job's definition hash
--   ndef      count   field/value pairs of its job definition that follow (create_jobs')
--   ndef*2    field, value ...
--
-- Derived keys: P..'job:'..wf..'@'..node, P..'ready:'..queue, P..'stats', P..'wfd:'..def,
--               the packed form's keys (include packed)
--
-- A node's job is made 'waiting'; a root gets its run at once (ready), unless the
-- instance is held (overlap buffer_one behind a running instance). A node's job is
-- packed (unless pack is '0', or its priority is no digit, as in create_jobs): a root
-- with its run, any other waiting, without a due time, until it is released (include
-- workflow's wf_release). Its claim and its ack are then those of a packed job, and the
-- end of its run moves the workflow as a job hash's does (finish_runs). Any other change
-- thaws it (include packed).
--
-- Returns: { status, state, dh, queues }
--   status 1 created, 0 the id existed (state and dh are the existing workflow's),
--          2 skipped (overlap skip, or buffer_one with an instance buffered already),
--          3 the id is a scheduled workflow's definition's
--   queues queues that received ready runs
--- @include "workflow"
--- @include "packed"

local wk = KEYS[1]
local P = ARGV[1]
local wf = ARGV[2]
local dh = ARGV[3]
local def = ARGV[4]
local overlap = ARGV[5]
local pack = ARGV[6] == '1'
local n = tonumber(ARGV[7])

local w = redis.call('HMGET', wk, 'st', 'dh')
if w[1] then
  return { 0, w[1], w[2] or '', {} }
end
-- One id names one workflow: a scheduled workflow's definition (a job of type
-- '@workflow', create_jobs) has this one. An instance's id has an '@', a job's none.
if def == '' and redis.call('HGET', P .. 'job:' .. wf, 't') == '@workflow' then
  return { 3, '', '', {} }
end
local now, _, nowStr = now_ms()

local hold = false
if def ~= '' then
  local dk = P .. 'wfd:' .. def
  local d = redis.call('HMGET', dk, 'act', 'bf')
  if runs_active(d[1]) and overlap ~= 'allow' then
    if overlap ~= 'buffer_one' or (d[2] and d[2] ~= '') then
      return { 2, '', '', {} }
    end
    hold = true
    redis.call('HSET', dk, 'bf', wf)
  else
    redis.call('HSET', dk, 'act', rl_add(d[1] or ',', wf))
  end
end

packed_reset()
local names = {}
-- The workflow hash's node fields, written at once after the loop, after the counts
-- every node's end reads (a small hash is a list searched from its start), and then the
-- parents, which only readers and retries read.
local writes = { 'left', n, 'bad', '0' }
local parentFields = {}
local i = 8
for c = 1, n do
  local node, rule, parents, children, ndh = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local ndef = tonumber(ARGV[i + 5])
  local defStart = i + 6
  local defEnd = defStart + ndef * 2 - 1
  i = defEnd + 1
  names[c] = node
  local np = 0
  for _ in string.gmatch(parents, '[^,]+') do
    np = np + 1
  end
  local id = wf .. '@' .. node
  local jobKey = P .. 'job:' .. id
  -- A job left from an earlier workflow of this id, which expired before its nodes
  -- could not be (see include workflow): replaced.
  redis.call('DEL', jobKey)
  local q, pri = '', ''
  for k = defStart, defEnd, 2 do
    local f = ARGV[k]
    if f == 'q' then
      q = ARGV[k + 1]
    elseif f == 'pr' then
      pri = ARGV[k + 1]
    end
  end
  local packs = pack and (pri == '' or PRI_DIGIT[pri])
  if np == 0 and not hold then
    -- A root: released at once, its job written ready with its run (wf_release's
    -- outcome, without reading back what was just written).
    if packs then
      packed_add(id, nowStr, q, pri, now, nowStr, ndh, ARGV, defStart, defEnd)
    else
      redis.call('HSET', jobKey, 'st', 'ready', 'nx', '0', 'cr', nowStr, 'dh', ndh, 'rl', ',' .. nowStr .. ',',
        unpack(ARGV, defStart, defEnd))
    end
    new_run(id, nowStr, q, pri)
    writes[#writes + 1] = 's:' .. node
    writes[#writes + 1] = 'released|' .. rule .. '|0|0|0|0|' .. nowStr .. '||'
  else
    if packs then
      -- Waiting, packed without a due time (include packed's packed_release gives it one).
      packed_add(id, nowStr, q, pri, now, 'W', ndh, ARGV, defStart, defEnd)
    else
      redis.call('HSET', jobKey, 'st', 'waiting', 'nx', '0', 'cr', nowStr, 'dh', ndh, 'rl', ',',
        unpack(ARGV, defStart, defEnd))
    end
    writes[#writes + 1] = 's:' .. node
    writes[#writes + 1] = 'waiting|' .. rule .. '|' .. np .. '|0|0|0|||'
  end
  local k = #writes
  writes[k + 1], writes[k + 2] = 'c:' .. node, children
  k = #parentFields
  parentFields[k + 1], parentFields[k + 2] = 'p:' .. node, parents
end
wf_hset(wk, writes)
wf_hset(wk, parentFields)
-- A packed job or run state left by an earlier workflow of this id goes (as its job
-- hashes did above), before the nodes are packed; also when this one is not packed (the
-- earlier one may have been): a claim takes a run whose id has a packed job for one.
for k = 1, n, 3000 do
  local last = math.min(k + 2999, n)
  local ids = {}
  for c = k, last do
    ids[#ids + 1] = wf .. '@' .. names[c]
  end
  redis.call('HDEL', P .. PACKED, unpack(ids))
  redis.call('HDEL', P .. PACKED_RUNS, unpack(ids))
end
packed_flush(P)
redis.call('HSET', wk, 'st', 'running', 'dh', dh, 'cr', nowStr, 'n', n, 'nodes', table.concat(names, ','))
if hold then
  redis.call('HSET', wk, 'hold', '1')
end
if def ~= '' then
  -- A retry checks it against the definition's other instances (retry_workflow).
  redis.call('HSET', wk, 'ov', overlap)
end
stat('w', 'created', 1)
local readied = flush_ready(P)
flush_stats(P)
return { 1, 'running', dh, readied }
