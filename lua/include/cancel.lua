-- cancel: cancelling one job, for cancel_job and cancel_workflow.
--- @include "forms"

-- cancel_one cancels job id: no further occurrences; ready, waiting and buffered runs are
-- removed; running runs are marked cancelled; a recurring job's dead runs leave the
-- dead-letter set (deadKey); the job expires after retention. Returns code (1 cancelled
-- now, 0 already final, -1 no such job), the job's state, the members of the runs that
-- were running and must be interrupted, and the most attempts one of its runs had made
-- (a workflow node's attempts; 0 when none had).
local function cancel_one(P, bucketsKey, deadKey, bucketMs, id, keep, retention)
  local jobKey = P .. 'job:' .. id
  -- A packed or cold job becomes a job hash first (forms' thaw_job).
  if redis.call('EXISTS', jobKey) == 0 then
    thaw_job(P, bucketsKey, bucketMs, id)
  end
  local j = redis.call('HMGET', jobKey, 'st', 'nx', 'rl', 'bf', 'q')
  if not j[1] then
    return -1, '', {}
  end
  if final(j[1]) then
    return 0, j[1], {}
  end

  local nx = tonumber(j[2]) or 0
  if nx > 0 then
    unfile_due(P, bucketsKey, bucketMs, id .. ':' .. j[2], nx, j[5])
  end

  local running = {}
  local rl = ','
  local fields = {}
  local att = 0
  -- The cancel's history entry names the next occurrence, or a run it removed (ready or
  -- retrying); none when it only interrupts running runs, whose ends are entered when
  -- their workers report; the time of the cancel for a job without a run.
  local entryDue = nx > 0 and nx or nil
  for due in string.gmatch(j[3] or '', '[^,]+') do
    local member = id .. ':' .. due
    local r = run_get(redis.call('HGET', jobKey, 'r' .. due))
    att = math.max(att, r.att)
    if r.st == 'running' or r.st == 'cancelled' then
      -- Its worker learns it from the cancel signal or its next heartbeat.
      r.st = 'cancelled'
      table.insert(fields, 'r' .. due)
      table.insert(fields, run_pack(r))
      table.insert(running, member)
      rl = rl .. due .. ','
    else
      -- Ready (with or without a run field yet), waiting for a retry, or parked.
      entryDue = entryDue or tonumber(due)
      redis.call('ZREM', P .. 'ready:' .. field(j[5], 'default'), member)
      if r.st == 'retrying' then
        unfile_due(P, bucketsKey, bucketMs, member, tonumber(r.ra), j[5])
      end
      redis.call('HDEL', jobKey, 'r' .. due)
    end
  end
  if j[4] and j[4] ~= '' then
    redis.call('HDEL', jobKey, 'r' .. j[4])
  end
  if #fields > 0 then
    redis.call('HSET', jobKey, unpack(fields))
  end
  -- Dead runs (of a recurring job: a dead one-time job is final and not cancelled).
  local all = redis.call('HGETALL', jobKey)
  for k = 1, #all, 2 do
    local f = all[k]
    if string.find(f, '^r%d') and run_get(all[k + 1]).st == 'dead' then
      local member = id .. ':' .. string.sub(f, 2)
      if redis.call('ZREM', deadKey, member) == 1 then
        stat('d', j[5], -1)
      end
      redis.call('HDEL', jobKey, f)
    end
  end

  redis.call('HSET', jobKey, 'st', 'cancelled', 'nx', 0, 'rl', rl, 'bf', '')
  local now = now_ms()
  if entryDue or #running == 0 then
    hist(jobKey, keep, { d = entryDue or now, e = now, o = 'cancelled', er = 'job cancelled' })
  end
  redis.call('PEXPIRE', jobKey, retention)
  return 1, 'cancelled', running, att
end
