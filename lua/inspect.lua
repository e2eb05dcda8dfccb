-- Who holds a lock, for dlock_inspect. Never returns a holder's secret token, only its label.
-- KEYS[1] holder; KEYS[2] fence counter; KEYS[3] holds; KEYS[4] hold data; KEYS[5] values (see
-- acquire.lua); KEYS[6] break records <prefix>{NAME}:broken (break.lua), when named
-- Returns {0} when free; {1, label, pttl, token, value} for the exclusive holder (label "" when
-- none; pttl -1 for no expiry; token: the fence counter, which is the holder's token since no
-- acquire succeeds while it holds; value '' when none); {2, sort, label, pttl, token, value,
-- ...} for shared or semaphore holders (sort 'shared' or 'permits:N'), at most 10000 of them;
-- {3, sort, label, pttl, token, value, take, ...} for a semaphore some hold of which took more
-- than one permit (acquire.lua's '~take').
-- When a marker closes the name (the holder key holds '~' .. what left it, e.g. '~broken'; or
-- the holds key has '~min_hold' or '~lock_delay' members: acquire.lua) or holds were broken lately, that reply comes wrapped: {-1, reply, closed ms (0 = none), closed
-- by ('' = none), {token, reason, ...}}.
-- pcall: a key overwritten with another type is not a dlock holder.
local function label_of(owner)
  local bar = string.find(owner, '|', 1, true)
  return bar and string.sub(owner, bar + 1) or ''
end
local function value_of(owner)
  local v = redis.pcall('HGET', KEYS[5], owner)
  return type(v) == 'string' and v or ''
end
-- A marker (owners start with hex digits) and the break records, when there are any.
local closed_ms, closed_by, broken = 0, '', {}
local function with_extras(reply)
  if closed_ms == 0 and #broken == 0 then return reply end
  return {-1, reply, closed_ms, closed_by, broken}
end
if KEYS[6] and redis.call('EXISTS', KEYS[6]) == 1 then
  local records = redis.pcall('HGETALL', KEYS[6])
  if type(records) == 'table' then broken = records end
end
local owner = redis.pcall('GET', KEYS[1])
if type(owner) == 'string' and string.byte(owner, 1) == 126 then  -- '~'
  closed_ms, closed_by = redis.call('PTTL', KEYS[1]), string.sub(owner, 2)
  if closed_ms < 0 then closed_ms = 0 end
elseif type(owner) == 'string' then
  return with_extras({1, label_of(owner), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0',
                      value_of(owner)})
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local holds = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. string.format('%.0f', now_ms), '+inf',
                          'WITHSCORES', 'LIMIT', 0, 10000)
if type(holds) ~= 'table' then holds = {} end
local takes = redis.call('HEXISTS', KEYS[4], '~take') == 1
local out = {takes and 3 or 2, redis.call('HGET', KEYS[4], '~sort') or 'shared'}
for i = 1, #holds, 2 do
  local left = holds[i + 1] == 'inf' and -1 or tonumber(holds[i + 1]) - now_ms
  if string.byte(holds[i], 1) == 126 then  -- '~': a job rule's marker (acquire.lua)
    if holds[i] ~= '~keep' and left > closed_ms then closed_ms, closed_by = left, string.sub(holds[i], 2) end
  else
    out[#out + 1] = label_of(holds[i])
    out[#out + 1] = left
    out[#out + 1] = redis.call('HGET', KEYS[4], holds[i]) or '0'
    out[#out + 1] = value_of(holds[i])
    if takes then out[#out + 1] = tonumber(redis.call('HGET', KEYS[4], holds[i] .. ' k') or '1') or 1 end
  end
end
if #out == 2 then return with_extras({0}) end
closed_ms = 0  -- holds stand: nothing is closed
return with_extras(out)
