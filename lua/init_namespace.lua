-- init_namespace: record a namespace's settings if it has none yet, all at once, so two
-- processes that initialise the namespace together with different settings cannot mix
-- them; then return what is recorded.
--
-- KEYS[1] meta    HASH    the namespace's settings
-- ARGV[1] shards  count   shard count
-- ARGV[2] bucket  ms      due-bucket width
-- ARGV[3] schema  number  data layout version
--
-- Returns: { created (1 when this call recorded the settings, else 0), shards, bucket,
--          schema } with the recorded values as strings.
local meta = KEYS[1]
local created = 0
if redis.call('HEXISTS', meta, 'shards') == 0 then
  redis.call('HSET', meta, 'shards', ARGV[1], 'bucket', ARGV[2], 'schema', ARGV[3])
  created = 1
end
local got = redis.call('HMGET', meta, 'shards', 'bucket', 'schema')
return { created, got[1], got[2], got[3] }
