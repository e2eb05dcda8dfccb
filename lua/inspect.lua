-- Who holds a lock, for dlock_inspect. Never returns the holder's secret token, only its label.
-- KEYS[1] holder key; KEYS[2] fence counter
-- Returns {0} when free, else {1, label, pttl, token} (label "" when none; pttl -1 for no
-- expiry; token: the fence counter, which is the holder's token since only acquires raise it).
-- pcall: a key overwritten with another type is not a dlock holder.
local owner = redis.pcall('GET', KEYS[1])
if type(owner) ~= 'string' then
  return {0}
end
local bar = string.find(owner, '|', 1, true)
local label = ''
if bar then
  label = string.sub(owner, bar + 1)
end
return {1, label, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0'}
