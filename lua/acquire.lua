-- Acquire a lock if nobody holds it, and issue its fencing token.
-- KEYS[1] holder key <prefix>{NAME}; KEYS[2] fence counter <prefix>{NAME}:fence (never expires)
-- ARGV[1] owner value (128-bit random token, optionally "|label"); ARGV[2] lease in ms, "0" = none
-- Returns {1, token} when acquired (token as a decimal string),
--         {0, pttl} when held by someone (pttl in ms, -1 when the holder has no expiry).
local ttl = redis.call('PTTL', KEYS[1])
if ttl ~= -2 then
  -- Already ours (a retry after a lost reply): same answer as the first time.
  if redis.pcall('GET', KEYS[1]) == ARGV[1] then
    return {1, redis.call('GET', KEYS[2])}
  end
  return {0, ttl}
end
-- The token is max(counter + 1, server time in microseconds): it rises across releases and
-- expiries through the counter, and across a restart that lost the counter through the clock.
local now = redis.call('TIME')
local now_us = now[1] .. string.format('%06d', tonumber(now[2]))
local next_token = redis.call('INCR', KEYS[2])
if tonumber(now_us) > next_token then
  redis.call('SET', KEYS[2], now_us)
end
if ARGV[2] == '0' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return {1, redis.call('GET', KEYS[2])}
