-- read_jobs: read whole jobs of one shard for a snapshot: each job's hash and expiry time,
-- all in one atomic step, so every job read is self-consistent. A job's runs need no
-- reading of their own: where each run is filed (due bucket, ready set, inflight set,
-- dead-letter set) follows from the job's hash, which the other scripts keep in step with
-- those sets (restore_jobs rebuilds them from it).
--
-- KEYS[1] buckets  ZSET    index of non-empty due buckets; only routes the call to the
--                          shard's slot (not read)
-- ARGV[1] prefix   string  shard key prefix `<ns>:v1:{<tag>}:`
-- ARGV[2] bucket   ms      due bucket width
-- ARGV[3] id       string  a job id; more ids may follow (ARGV[4], ...)
--
-- Derived keys: P..'job:'..id, the cold and packed job keys of common (a cold or packed
--               job is read as the hash it will have when thawed or unpacked)
--
-- Returns: per job that exists, 3 entries: id, expiry time (ms since the epoch, -1 none),
--          fields (HGETALL: field, value, ...). Jobs gone since their ids were listed are
--          left out.
--- @include "common"

local P = ARGV[1]
local bucketMs = tonumber(ARGV[2])
local anyCold = redis.call('EXISTS', P .. 'cold') == 1
local anyPacked = redis.call('EXISTS', P .. PACKED) == 1
local now = now_ms()

local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local jobKey = P .. 'job:' .. id
  local fields = redis.call('HGETALL', jobKey)
  local v = #fields == 0 and anyPacked and redis.call('HGET', P .. PACKED, id)
  if #fields > 0 then
    out[#out + 1] = id
    out[#out + 1] = redis.call('PEXPIRETIME', jobKey)
    out[#out + 1] = fields
  elseif v then
    -- A packed job whose expiry has passed (not deleted yet) is left out.
    local f, exp = packed_fields(P, id, v, redis.call('HGET', P .. PACKED_RUNS, id), now)
    if f then
      out[#out + 1] = id
      out[#out + 1] = exp
      out[#out + 1] = f
    end
  elseif anyCold then
    local rec, b = cold_find(P, id)
    if rec then
      local _, _, f = cold_fields(rec, tonumber(b), bucketMs)
      out[#out + 1] = id
      out[#out + 1] = -1
      out[#out + 1] = f
    end
  end
end
return out
