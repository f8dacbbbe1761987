-- acquire_lease: take or renew a shard's lease. A new owner gets a higher epoch (the
-- fencing token checked by every state-changing dispatcher script).
--
-- KEYS[1] lease   STRING  `owner:epoch`, with a TTL
-- KEYS[2] epoch   STRING  the shard's epoch counter (never expires)
-- ARGV[1] owner   string  the dispatcher's name (no ':')
-- ARGV[2] ttl     ms      lease time to live
--
-- Returns: { epoch, ttl } epoch > 0 when the caller holds the lease (taken now or
--          renewed), or -1 and the remaining ms of the other owner's lease.
local leaseKey, epochKey = KEYS[1], KEYS[2]
local owner, ttl = ARGV[1], tonumber(ARGV[2])

local cur = redis.call('GET', leaseKey)
if cur then
  local i = string.find(cur, ':[^:]*$')
  if string.sub(cur, 1, i - 1) == owner then
    redis.call('PEXPIRE', leaseKey, ttl)
    return { tonumber(string.sub(cur, i + 1)), ttl }
  end
  return { -1, redis.call('PTTL', leaseKey) }
end
local epoch = redis.call('INCR', epochKey)
redis.call('SET', leaseKey, owner .. ':' .. epoch, 'PX', ttl)
return { epoch, ttl }
