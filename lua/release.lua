-- Release a lock held by this owner and wake its waiters.
-- KEYS[1] holder key; ARGV[1] owner value; ARGV[2] release channel <prefix>{NAME}:released;
-- ARGV[3] "1" to publish on the sharded channel (Redis Cluster: SPUBLISH reaches the slot's
-- nodes only, where PUBLISH goes to every node of the cluster)
-- Returns 1 when released, 0 when this owner no longer held it.
-- pcall: a key overwritten with another type is simply not ours.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[3] == '1' then
  redis.call('SPUBLISH', ARGV[2], 'released')
else
  redis.call('PUBLISH', ARGV[2], 'released')
end
return 1
