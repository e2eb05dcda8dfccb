-- Renew (heartbeat) or change the lease of a hold by this owner.
-- KEYS: the exclusive holder's key alone, or holds and hold data for a shared or semaphore hold
-- (see acquire.lua, and release.lua for why)
-- ARGV[1] owner value; ARGV[2] new lease in ms, "0" = no expiry; ARGV[3] 'exclusive' or 'hold'.
-- A hold with a value names the value key last (acquire.lua): its expiry follows.
-- Returns 1 when renewed, 0 when this owner no longer holds it.
local owner, lease = ARGV[1], ARGV[2]
if ARGV[3] == 'exclusive' then
  if redis.pcall('GET', KEYS[1]) ~= owner then
    return 0
  end
  for k = 1, #KEYS do
    if lease == '0' then
      redis.call('PERSIST', KEYS[k])
    else
      redis.call('PEXPIRE', KEYS[k], lease)
    end
  end
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
local function ms(x) return string.format('%.0f', x) end
redis.call('ZADD', KEYS[1], 'XX', lease == '0' and 'inf' or ms(now_ms + tonumber(lease)), owner)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
for k = 1, #KEYS do
  if last == 'inf' then redis.call('PERSIST', KEYS[k]) else redis.call('PEXPIREAT', KEYS[k], ms(tonumber(last) + 1)) end
end
return 1
