-- Release a hold by this owner and wake the lock's waiters.
-- KEYS: the exclusive holder's key alone, or holds and hold data for a shared or semaphore hold
-- (see acquire.lua): a key named but missing makes Redis Cluster refuse a script while its slot
-- migrates (TRYAGAIN), so each hold names only the keys it has.
-- ARGV[1] owner value; ARGV[2] release channel <prefix>{NAME}:released; ARGV[3] "1" to publish
-- on the sharded channel (Redis Cluster: SPUBLISH reaches the slot's nodes only, where PUBLISH
-- goes to every node of the cluster); ARGV[4] 'exclusive' or 'hold' (shared or semaphore)
-- Returns 1 when released, 0 when this owner no longer held it.
-- pcall: a key overwritten with another type is simply not ours.
local owner = ARGV[1]
if ARGV[4] == 'exclusive' then
  if redis.pcall('GET', KEYS[1]) ~= owner then
    return 0
  end
  redis.call('DEL', KEYS[1])
else
  local expiry = redis.pcall('ZSCORE', KEYS[1], owner)
  if type(expiry) ~= 'string' then
    return 0
  end
  redis.call('ZREM', KEYS[1], owner)
  redis.call('HDEL', KEYS[2], owner)
  if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1], KEYS[2]) end
  if expiry ~= 'inf' then
    local now = redis.call('TIME')
    if tonumber(expiry) <= tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) then
      return 0  -- its lease had run out: it was not held any more (its entry is gone now)
    end
  end
end
if ARGV[3] == '1' then
  redis.call('SPUBLISH', ARGV[2], 'released')
else
  redis.call('PUBLISH', ARGV[2], 'released')
end
return 1
