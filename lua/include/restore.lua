-- restore: write one job of a snapshot (as read_jobs read it) and file its runs again, as
-- the other scripts would have left them, from the job's hash; restore_jobs and
-- restore_workflows (a workflow's nodes) call it. The filing rules are restore_jobs'.
--- @include "forms"

-- restore_job writes job id with its fields f (a table, changed in place) and expiry
-- (ms since the epoch, 0 never) unless a job of the id exists (any form) or its expiry
-- has passed. Returns 'restored', 'existed' or 'expired', and the earliest due time it
-- filed (ms, -1 none).
local function restore_job(P, bucketsKey, deadKey, bucketMs, now, id, expiry, f)
  local jobKey = P .. 'job:' .. id
  if redis.call('EXISTS', jobKey) == 1 or thaw_job(P, bucketsKey, bucketMs, id) then
    return 'existed', -1
  end
  if expiry > 0 and expiry <= now then
    return 'expired', -1
  end
  local wake = -1
  local function file(member, score, q)
    file_due(P, bucketsKey, bucketMs, member, score, q)
    if wake == -1 or score < wake then
      wake = score
    end
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
  return 'restored', wake
end
