-- release_lease: give up a shard's lease, if the caller still holds it.
--
-- KEYS[1] lease  STRING  `owner:epoch`
-- ARGV[1] lease  string  the caller's `owner:epoch`
--
-- Returns: 1 released, 0 not held by the caller (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
