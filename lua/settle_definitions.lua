-- settle_definitions: after a restore, make scheduled workflows' definition hashes agree
-- with the instances restored (restore_workflows rebuilds them as it writes instances):
-- the running instances 'act' keep only the instances that run, the buffered one 'bf'
-- stays only while it is held, and a buffered instance with no running one left to wait
-- for starts (its roots are released), as it would have when the last one ended. A hash
-- left with no instance is deleted (include workflow: it exists only while it holds one).
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets; only routes the call to the
--                          shard's slot (not read)
-- ARGV[1] prefix   string  shard key prefix
-- ARGV[2] def      string  a definition id; more may follow (ARGV[3], ...)
--
-- Derived keys: P..'wfd:'..def, P..'wf:'..instance, P..'job:'..instance..'@'..node,
--               P..'ready:'..queue, P..'stats', and the packed form's keys (a released
--               node's packed job is given its due time: include workflow's wf_release)
--
-- Returns: { started, queues }
--   started  buffered instances started
--   queues   queues that received ready runs
--- @include "workflow"

local P = ARGV[1]
local _, _, nowStr = now_ms()
local started = 0

for i = 2, #ARGV do
  local dk = P .. 'wfd:' .. ARGV[i]
  local d = redis.call('HMGET', dk, 'act', 'bf')
  if d[1] or d[2] then
    local act = ','
    for wf in string.gmatch(d[1] or '', '[^,]+') do
      local w = redis.call('HMGET', P .. 'wf:' .. wf, 'st', 'hold')
      if w[1] == 'running' and w[2] ~= '1' then
        act = rl_add(act, wf)
      end
    end
    local bf = d[2] or ''
    if bf ~= '' then
      local w = redis.call('HMGET', P .. 'wf:' .. bf, 'st', 'hold')
      if w[1] ~= 'running' or w[2] ~= '1' then
        bf = ''
      elseif not runs_active(act) then
        wf_hold_release(P, P .. 'wf:' .. bf, bf, nowStr)
        act, bf = rl_add(act, bf), ''
        started = started + 1
      end
    end
    wf_definition_set(dk, act, bf)
  end
end

local readied = flush_ready(P)
flush_stats(P)
return { started, readied }
