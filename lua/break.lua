-- Break lock NAME (dlock_break): an operator's takeover. Deletes every hold of the name and any
-- job rule's marker (they live in the holds key), never the fence counter, so the next token is still greater than every token issued.
-- Records each broken hold's token with the reason, for the broken holders' next renewal,
-- extend or release to say why they were refused (inspect.lua). Unless told to free it now,
-- leaves a marker '~broken' in the holder key, with no owner, until the broken holds' leases
-- would have ended: broken holders keep working until they hear, and no new holder may overlap
-- them; an earlier break's marker keeps what is left of its time. Wakes the waiters.
-- KEYS[1] holder; KEYS[2] fence counter; KEYS[3] holds; KEYS[4] hold data; KEYS[5] values (see
-- acquire.lua); KEYS[6] break records <prefix>{NAME}:broken: hash, token -> reason
-- ARGV[1] the reason ('' = none); ARGV[2] '1' to free the name now; ARGV[3] the release channel
-- and ARGV[4] '1' to publish on it sharded (see release.lua); ARGV[5] how long the records
-- stay, ms; ARGV[6] the most records kept (the greatest tokens)
-- Returns {sort, closed ms, label, pttl, token, id, ...}: sort 'exclusive', 'shared', 'permits:N',
-- or '' when nobody held it; closed ms 0 when no marker was left; then per broken hold its
-- owner label, what was left of its lease (-1: no expiry), its token, and a public id (a hash
-- of the secret owner value, alike on every Redlock master).
-- pcall: a key overwritten with another type holds no dlock hold.
local reason, now_flag, channel = ARGV[1], ARGV[2], ARGV[3]
local keep_ms, max_records = ARGV[5], tonumber(ARGV[6])

local function label_of(owner)
  local bar = string.find(owner, '|', 1, true)
  return bar and string.sub(owner, bar + 1) or ''
end

local sort, out, closing = '', {}, 0
local function broke(owner, pttl, token)
  out[#out + 1] = label_of(owner)
  out[#out + 1] = pttl
  out[#out + 1] = token
  out[#out + 1] = redis.sha1hex(owner)
  if pttl > closing then closing = pttl end
end

local holder = redis.pcall('GET', KEYS[1])
local earlier = 0  -- what is left of an earlier break's marker: its broken holders may not know yet
if type(holder) == 'string' and string.byte(holder, 1) ~= 126 then  -- not a '~' marker
  sort = 'exclusive'
  broke(holder, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0')
elseif holder == '~broken' then
  earlier = redis.call('PTTL', KEYS[1])
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local holds = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. string.format('%.0f', now_ms), '+inf',
                          'WITHSCORES')
for i = 1, (type(holds) == 'table' and #holds or 0), 2 do
  if string.byte(holds[i], 1) ~= 126 then  -- not a job rule's '~' marker (acquire.lua)
    if sort == '' then
      sort = redis.pcall('HGET', KEYS[4], '~sort')
      if type(sort) ~= 'string' then sort = 'shared' end
    end
    local token = redis.pcall('HGET', KEYS[4], holds[i])
    broke(holds[i], holds[i + 1] == 'inf' and -1 or tonumber(holds[i + 1]) - now_ms,
          type(token) == 'string' and token or '0')
  end
end

redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5])
if #out > 0 then
  for i = 3, #out, 4 do redis.call('HSET', KEYS[6], out[i], reason) end
  -- Only the newest records stay: the greatest tokens (as numbers: tokens have many lengths).
  local tokens = redis.call('HKEYS', KEYS[6])
  if #tokens > max_records then
    table.sort(tokens, function(a, b) return (tonumber(a) or 0) > (tonumber(b) or 0) end)
    for i = max_records + 1, #tokens do redis.call('HDEL', KEYS[6], tokens[i]) end
  end
  redis.call('PEXPIRE', KEYS[6], keep_ms)
end
if earlier > closing then closing = earlier end
if now_flag == '1' then closing = 0 end
if closing > 0 then redis.call('SET', KEYS[1], '~broken', 'PX', closing) end
if ARGV[4] == '1' then
  redis.call('SPUBLISH', channel, 'released')
else
  redis.call('PUBLISH', channel, 'released')
end
local reply = {sort, closing}
for _, v in ipairs(out) do reply[#reply + 1] = v end
return reply
