-- Replace the value stored with a hold by this owner (dlock_lock_set_value); '' removes it.
-- The value lives in the value key <prefix>{NAME}:value (see acquire.lua) and keeps its
-- expiry in step with the hold's.
-- KEYS: the exclusive holder's key and the value key, or holds, hold data and the value key for
-- a shared or semaphore hold (see acquire.lua)
-- ARGV[1] owner value; ARGV[2] the value ('' = none); ARGV[3] 'exclusive' or 'hold'; ARGV[4] the
-- release channel <prefix>{NAME}:released and ARGV[5] '1' to publish on it sharded (see
-- release.lua): a stored value publishes 'changed' there, which observers hear (waiters do not
-- wake for it)
-- Returns 1 when stored, 0 when this owner no longer holds it (nothing is written).
local owner, value = ARGV[1], ARGV[2]
local vkey = KEYS[#KEYS]
local function changed()
  if not ARGV[4] then return end
  if ARGV[5] == '1' then
    redis.call('SPUBLISH', ARGV[4], 'changed')
  else
    redis.call('PUBLISH', ARGV[4], 'changed')
  end
end
if ARGV[3] == 'exclusive' then
  if redis.pcall('GET', KEYS[1]) ~= owner then
    return 0
  end
  redis.call('DEL', vkey)
  if value ~= '' then
    redis.call('HSET', vkey, owner, value)
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then redis.call('PEXPIRE', vkey, ttl) end
  end
  changed()
  return 1
end
local expiry = redis.pcall('ZSCORE', KEYS[1], owner)
if type(expiry) ~= 'string' then
  return 0
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if expiry ~= 'inf' and tonumber(expiry) <= now_ms then
  return 0  -- its lease ran out: the next acquire removes it
end
if value == '' then
  redis.call('HDEL', vkey, owner)
  changed()
  return 1
end
redis.call('HSET', vkey, owner, value)
-- The value key ends with the last hold, as the holds do.
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
if last == 'inf' then
  redis.call('PERSIST', vkey)
else
  redis.call('PEXPIREAT', vkey, string.format('%.0f', tonumber(last) + 1))
end
changed()
return 1
