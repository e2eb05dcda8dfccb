-- Renew (heartbeat) or change the lease of a hold by this owner.
-- KEYS: the exclusive holder's key alone, or holds and hold data for a shared or semaphore hold
-- (see acquire.lua, and release.lua for why)
-- ARGV[1] owner value; ARGV[2] new lease in ms, "0" = no expiry; ARGV[3] 'exclusive' or 'hold';
-- ARGV[4] the hold's lock-delay, ms ('0' or absent: none): its marker (acquire.lua) moves to
-- the new lease's end + the delay, and an exclusive hold then names the holds key last.
-- A hold with a value names the value key last (before the holds key): its expiry follows.
-- Returns 1 when renewed, 0 when this owner no longer holds it.
local owner, lease = ARGV[1], ARGV[2]
local delay = tonumber(ARGV[4] or '0') or 0
local function ms(x) return string.format('%.0f', x) end
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
-- The lock-delay marker in the holds key follows the lease: none without expiry.
local function move_delay(holds, exclusive)
  local ends = ms(now_ms() + tonumber(lease) + delay)
  if exclusive and lease == '0' then
    redis.call('ZREM', holds, '~lock_delay')
  elseif exclusive then
    redis.call('ZADD', holds, ends, '~lock_delay')  -- its own: a shorter lease moves it back
  elseif lease ~= '0' then
    -- A shared or semaphore hold marks its delay when it ends (acquire.lua); till then the
    -- keys must last that long.
    redis.call('ZADD', holds, 'GT', ends, '~keep')
  end
  local last = redis.call('ZRANGE', holds, -1, -1, 'WITHSCORES')[2]
  if last == nil then return end
  if last == 'inf' then redis.call('PERSIST', holds) else redis.call('PEXPIREAT', holds, ms(tonumber(last) + 1)) end
end
if ARGV[3] == 'exclusive' then
  if redis.pcall('GET', KEYS[1]) ~= owner then
    return 0
  end
  local plain = delay > 0 and #KEYS - 1 or #KEYS
  for k = 1, plain do
    if lease == '0' then
      redis.call('PERSIST', KEYS[k])
    else
      redis.call('PEXPIRE', KEYS[k], lease)
    end
  end
  if delay > 0 then move_delay(KEYS[#KEYS], true) end
  return 1
end
local expiry = redis.pcall('ZSCORE', KEYS[1], owner)
if type(expiry) ~= 'string' then
  return 0
end
local now = now_ms()
if expiry ~= 'inf' and tonumber(expiry) <= now then
  return 0  -- its lease ran out: the next acquire removes it
end
redis.call('ZADD', KEYS[1], 'XX', lease == '0' and 'inf' or ms(now + tonumber(lease)), owner)
if delay > 0 then move_delay(KEYS[1], false) end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
for k = 1, #KEYS do
  if last == 'inf' then redis.call('PERSIST', KEYS[k]) else redis.call('PEXPIREAT', KEYS[k], ms(tonumber(last) + 1)) end
end
return 1
