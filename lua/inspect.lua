-- Who holds a lock, for dlock_inspect. Never returns a holder's secret token, only its label.
-- KEYS[1] holder; KEYS[2] fence counter; KEYS[3] holds; KEYS[4] hold data; KEYS[5] values (see
-- acquire.lua)
-- Returns {0} when free; {1, label, pttl, token, value} for the exclusive holder (label "" when
-- none; pttl -1 for no expiry; token: the fence counter, which is the holder's token since no
-- acquire succeeds while it holds; value '' when none); {2, sort, label, pttl, token, value,
-- ...} for shared or semaphore holders (sort 'shared' or 'permits:N'), at most 10000 of them.
-- pcall: a key overwritten with another type is not a dlock holder.
local function label_of(owner)
  local bar = string.find(owner, '|', 1, true)
  return bar and string.sub(owner, bar + 1) or ''
end
local function value_of(owner)
  local v = redis.pcall('HGET', KEYS[5], owner)
  return type(v) == 'string' and v or ''
end
local owner = redis.pcall('GET', KEYS[1])
if type(owner) == 'string' then
  return {1, label_of(owner), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0',
          value_of(owner)}
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local holds = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. string.format('%.0f', now_ms), '+inf',
                          'WITHSCORES', 'LIMIT', 0, 10000)
if type(holds) ~= 'table' or #holds == 0 then
  return {0}
end
local out = {2, redis.call('HGET', KEYS[4], '~sort') or 'shared'}
for i = 1, #holds, 2 do
  out[#out + 1] = label_of(holds[i])
  out[#out + 1] = holds[i + 1] == 'inf' and -1 or tonumber(holds[i + 1]) - now_ms
  out[#out + 1] = redis.call('HGET', KEYS[4], holds[i]) or '0'
  out[#out + 1] = value_of(holds[i])
end
return out
