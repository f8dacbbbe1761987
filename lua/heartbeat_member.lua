-- heartbeat_member: record that a dispatcher is alive (or leaving) and list the live ones.
-- Not a shard script: the membership key is global.
--
-- KEYS[1] members  ZSET  dispatcher names; score = expiry ms
-- ARGV[1] name     string  the dispatcher's name
-- ARGV[2] ttl      ms      how long the record lives without another heartbeat
-- ARGV[3] leaving  '1' to remove the record, '0' to refresh it
--
-- Returns: the names of the live dispatchers.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)
