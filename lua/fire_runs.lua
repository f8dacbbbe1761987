-- fire_runs: move due runs of one shard to their ready sets and re-file recurring jobs at
-- their next occurrence, under the caller's shard lease.
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets
-- KEYS[2] lease    STRING  `owner:epoch` of the dispatcher that owns the shard
-- ARGV[1] prefix   string  shard key prefix
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] lease    string  the caller's `owner:epoch`
-- ARGV[4] keep     count   history entries kept per job
-- ARGV[5] n        count   entries that follow
-- then per entry (as peek_due returned it, plus the dispatcher's plan):
--   member   string  run member `<jobID>:<due>`
--   score    ms      its score when peeked; the entry is skipped unless it still has it
--   version  string  cron jobs: the job version peeked ('' otherwise); skipped on mismatch
--   next     ms      cron jobs: next occurrence to file (0 none)
--   missed   count   cron jobs: occurrences recorded as missed (misfire policy)
--   nfire    count   cron jobs: occurrences to fire that follow (0 for other kinds)
--   nfire    due ms  ...
--
-- Derived keys: P..'job:'..id, P..'due:'..bucket, P..'ready:'..queue, P..'stats'
--
-- Returns: { fired, queues } runs made ready and the queues that received them,
--          or -3 when the caller does not hold the lease (nothing changed).
--- @include "common"

local bucketsKey, leaseKey = KEYS[1], KEYS[2]
local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local keep = tonumber(ARGV[4])
local n = tonumber(ARGV[5])

if redis.call('GET', leaseKey) ~= ARGV[3] then
  return -3
end

local fired = 0
local i = 6
for _ = 1, n do
  local member, score, ver = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local next, missed, nfire = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local fires = i + 6
  i = fires + nfire

  local b = num(math.floor(score / bucketMs))
  local cur = redis.call('ZSCORE', P .. 'due:' .. b, member)
  if cur and tonumber(cur) == score then
    local id, due = split_run(member)
    local jobKey = P .. 'job:' .. id
    local j = redis.call('HMGET', jobKey, 'st', 'ver', 'q', 'pr', 'sk', 'ov', 'rl', 'bf', 'r' .. due)
    local st, q, pri, rl = j[1], j[3], j[4], j[7]
    local once = field(j[5], 'at') == 'at'
    if st and rl_has(rl, due) then
      -- A retry (or snoozed run) whose time has come.
      unfile_later(b, member, q)
      if fire_retry(jobKey, member, due, q, pri, st, once, j[9]) then
        fired = fired + 1
      end
    elseif not st or final(st) or st == 'paused' then
      -- Nothing to fire: the job is gone or no longer schedules runs.
      if st then
        unfile_later(b, member, q)
      else
        unfile_later(b, member, UNKNOWN_Q)
      end
    elseif once then
      unfile_later(b, member, q)
      new_run(id, due, q, pri)
      fired = fired + 1
      redis.call('HSET', jobKey, 'st', 'ready', 'nx', 0, 'rl', rl_add(rl, due))
    elseif field(j[2], '') == ver then
      unfile_later(b, member, q)
      local ov, bf = field(j[6], 'skip'), j[8]
      -- The latest occurrence handled (fired, buffered, skipped or missed): common's
      -- cron_floor files nothing at or before it again.
      local lf = score
      for k = fires, fires + nfire - 1 do
        local d = ARGV[k]
        lf = math.max(lf, tonumber(d))
        if not runs_active(rl) or ov == 'allow' then
          new_run(id, d, q, pri)
          fired = fired + 1
          rl = rl_add(rl, d)
        elseif ov == 'buffer_one' and (not bf or bf == '') then
          local r = run_get(nil)
          r.st = 'buffered'
          redis.call('HSET', jobKey, 'r' .. d, run_pack(r))
          bf = d
        else
          hist(jobKey, keep, { d = tonumber(d), o = 'skipped' })
        end
      end
      if missed > 0 then
        hist(jobKey, keep, { d = score, o = 'missed', m = missed })
      end
      if next > 0 then
        file_due(P, bucketsKey, bucketMs, id .. ':' .. num(next), next, q)
      end
      redis.call('HSET', jobKey, 'nx', num(next), 'rl', rl, 'bf', bf or '', 'lf', num(lf))
    end
  end
end

flush_unfile(P, bucketsKey)
local readied = flush_ready(P)
flush_stats(P)
return { fired, readied }
