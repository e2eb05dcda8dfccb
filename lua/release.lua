-- Release a hold by this owner and wake the lock's waiters: an exclusive hold is handed straight
-- to the first live fair waiter in line, if any, and only that one is told; otherwise every
-- waiter is woken.
-- KEYS: for the exclusive hold, the holder and the line, and to hand over, the fence counter,
-- the line data and the writer announcement too (holder, line, fence, line data, writer); for a
-- shared or semaphore hold, holds and hold data (see acquire.lua). A key named but missing
-- makes Redis Cluster refuse a script while its slot migrates (TRYAGAIN): a shared hold names
-- only the keys it has, and hands nothing over.
-- ARGV[1] owner value; ARGV[2] release channel <prefix>{NAME}:released; ARGV[3] "1" to publish
-- on the sharded channel (Redis Cluster: SPUBLISH reaches the slot's nodes only, where PUBLISH
-- goes to every node of the cluster); ARGV[4] 'exclusive' or 'hold' (shared or semaphore);
-- ARGV[5] (exclusive, with all five keys) a fair waiter's id that leaves the line: it stopped
-- waiting, and what was handed to it meanwhile is released ('' or absent: none); ARGV[6] '1'
-- when the hold has a value to remove. The value key <prefix>{NAME}:value (acquire.lua) is
-- named last: always by an exclusive release (KEYS[6]: a hand-over stores the next holder's
-- value there), by a shared or semaphore release when its hold has a value (KEYS[3]).
-- Publishes 'released' to wake every waiter, or 'grant:ID:TOKEN' to the waiter ID it handed the
-- lock to. Returns 1 when released, 0 when this owner no longer held it, {3} when a line
-- waits and it was given the holder and the line alone (call again with all five keys; nothing
-- was written).
-- pcall: a key overwritten with another type is simply not ours.
local owner, channel = ARGV[1], ARGV[2]
local has_value = ARGV[6] == '1'
local function publish(message)
  if ARGV[3] == '1' then
    redis.call('SPUBLISH', channel, message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

if ARGV[4] == 'exclusive' then
  local leaving = ARGV[5] or ''
  local vkey = KEYS[6]
  if leaving ~= '' and redis.call('ZREM', KEYS[2], leaving) == 1 then redis.call('HDEL', KEYS[4], leaving, leaving .. ' v') end
  if redis.pcall('GET', KEYS[1]) ~= owner then
    return 0
  end
  -- The first live waiter in line gets the lock, with what is left of the lease it asked for
  -- counted from its last attempt (it counts its local deadline from when it sent that one).
  -- Places whose time ran out are dropped on the way. (KEYS[2] is absent from callers that
  -- predate the line.)
  local waiting = KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1
  if waiting and #KEYS < 5 then return {3} end
  local line = waiting and redis.call('ZRANGE', KEYS[2], 0, 15) or {}
  if #line > 0 then
    local now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    for _, id in ipairs(line) do
      local entry = redis.call('HGET', KEYS[4], id)
      local next_value = redis.call('HGET', KEYS[4], id .. ' v')
      redis.call('ZREM', KEYS[2], id)
      redis.call('HDEL', KEYS[4], id, id .. ' v')
      local t, span, lease, next_owner
      if entry then t, span, lease, next_owner = string.match(entry, '^(%d+) (%d+) (%d+) (.+)$') end
      if t and tonumber(t) + tonumber(span) > now_ms and
         (lease == '0' or tonumber(t) + tonumber(lease) > now_ms) then
        local now_us = now[1] .. string.format('%06d', tonumber(now[2]))
        local token = redis.call('INCR', KEYS[3])
        if token >= 9007199254740992 then
          -- Past 2^53 - 1 no token is issued (acquire.lua): nothing is handed over. The lock
          -- is freed and every waiter woken; their own attempts meet the refusal.
          redis.call('DECR', KEYS[3])
          break
        end
        if tonumber(now_us) > token then
          redis.call('SET', KEYS[3], now_us)
          token = now_us
        else
          token = redis.call('GET', KEYS[3])
        end
        local until_ms = string.format('%.0f', tonumber(t) + tonumber(lease))
        if lease == '0' then
          redis.call('SET', KEYS[1], next_owner)
        else
          redis.call('SET', KEYS[1], next_owner, 'PXAT', until_ms)
        end
        -- The next holder's own value, expiring with it.
        if vkey then
          if has_value then redis.call('DEL', vkey) end
          if next_value then
            redis.call('HSET', vkey, next_owner, next_value)
            if lease ~= '0' then redis.call('PEXPIREAT', vkey, until_ms) end
          end
        end
        if redis.call('GET', KEYS[5]) == next_owner then redis.call('DEL', KEYS[5]) end
        publish('grant:' .. id .. ':' .. token)
        return 1
      end
    end
  end
  redis.call('DEL', KEYS[1])
  if has_value then redis.call('DEL', vkey) end
else
  local vkey = has_value and KEYS[3] or nil
  local expiry = redis.pcall('ZSCORE', KEYS[1], owner)
  if type(expiry) ~= 'string' then
    return 0
  end
  redis.call('ZREM', KEYS[1], owner)
  redis.call('HDEL', KEYS[2], owner)
  if vkey then redis.call('HDEL', vkey, owner) end
  if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1], KEYS[2], vkey or KEYS[2]) end
  if expiry ~= 'inf' then
    local now = redis.call('TIME')
    if tonumber(expiry) <= tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) then
      return 0  -- its lease had run out: it was not held any more (its entry is gone now)
    end
  end
end
publish('released')
return 1
