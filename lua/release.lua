-- Release a hold by this owner and wake the lock's waiters: an exclusive hold is handed straight
-- to the first live fair waiter in line, if any, and only that one is told; otherwise every
-- waiter is woken.
-- KEYS: for the exclusive hold, the holder and the line, the fence counter, the line data and
-- the writer announcement (holder, line, fence, line data, writer: a hand-over needs the last
-- three); for a shared or semaphore hold, holds and hold data (see acquire.lua). A key named but
-- missing makes Redis Cluster refuse a script while its slot migrates (TRYAGAIN): a call names
-- only the keys it may use, and a shared hold hands nothing over.
-- ARGV[1] owner value; ARGV[2] release channel <prefix>{NAME}:released; ARGV[3] "1" to publish
-- on the sharded channel (Redis Cluster: SPUBLISH reaches the slot's nodes only, where PUBLISH
-- goes to every node of the cluster); ARGV[4] 'exclusive' or 'hold' (shared or semaphore);
-- ARGV[5] (exclusive, with all five keys) a fair waiter's id that leaves the line: it stopped
-- waiting, and what was handed to it meanwhile is released ('' or absent: none); ARGV[6] '1'
-- when the hold has a value to remove. The value key <prefix>{NAME}:value (acquire.lua) is
-- named last, and only when a value may be involved: by a release whose hold has a value
-- (KEYS[6] for the exclusive hold, KEYS[3] for a shared or semaphore one), by a waiter leaving
-- the line (KEYS[6]: what was handed to it is released, and may be handed on), and by an
-- exclusive release called again because the waiter it hands the lock to stored a value,
-- which goes there.
-- A semaphore's hold names the line keys too: KEYS holds, hold data, value, line, fence, line
-- data (acquire.lua). Its release hands the permits it freed to the first live waiters in line
-- whose takes fit, in order, each with a token and what is left of the lease it asked for
-- counted from its last attempt, and tells each one ('grant:ID:TOKEN'); it wakes every waiter
-- ('released') when nobody waits in line. Not while a job rule's marker stands: the waiters,
-- woken, meet it. A waiter leaving the line (ARGV[5]) hands on what it would have blocked.
-- ARGV[7] '1' when the hold has job rules (a min hold, a lock-delay: acquire.lua's markers), '2'
-- when such a hold is given back (an acquire that did not happen: an exclusive one's markers
-- go with it); an exclusive one then names all five keys, the value key and the holds key, last. A release is a
-- clean end: the lock-delay marker goes once no hold stands; a min hold marker that still
-- stands keeps the name closed (nothing is handed over, and the waiters, woken, meet it).
-- Publishes 'released' to wake every waiter, or 'grant:ID:TOKEN' to the waiter ID it handed the
-- lock to. Returns 1 when released, 0 when this owner no longer held it, {3} (nothing was
-- written; call again with all five keys and the value key) when a line waits and it was given
-- the holder and the line alone, or when the waiter it would hand the lock to stored a value
-- and the value key was not named.
-- pcall: a key overwritten with another type is simply not ours.
local owner, channel = ARGV[1], ARGV[2]
local has_value = ARGV[6] == '1'
local ruled = ARGV[7] == '1' or ARGV[7] == '2'
local given_back = ARGV[7] == '2'  -- an acquire that did not happen: its markers go too
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
-- After a clean end: the lock-delay marker goes once no hold stands under holds; whether a
-- min hold marker still closes the name.
local function min_hold_stands(holds)
  local markers = 0
  for _, rule in ipairs({'~min_hold', '~lock_delay'}) do
    if redis.call('ZSCORE', holds, rule) then markers = markers + 1 end
  end
  if markers > 0 and redis.call('ZCARD', holds) == markers then redis.call('ZREM', holds, '~lock_delay') end
  local ends = redis.call('ZSCORE', holds, '~min_hold')
  if ends and tonumber(ends) > now_ms() then return true end
  if redis.call('ZCARD', holds) == 0 then redis.call('DEL', holds) end
  return false
end
local function publish(message)
  if ARGV[3] == '1' then
    redis.call('SPUBLISH', channel, message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

-- A token for a hand-over, as acquire.lua's next_token issues one: the clock's value, or counter
-- + 1 when the counter is not below the clock; nil past 2^53 - 1 (the counter left as it was),
-- or an error reply when the counter is another type (nothing written).
local function issue_token(counter, now)
  local us = now[2]
  if #us < 6 then us = string.rep('0', 6 - #us) .. us end
  local token = now[1] .. us
  local before = redis.pcall('SET', counter, token, 'GET')
  if before and not (#before == #token and before < token and string.find(before, '^[1-9]%d*$')) then
    if type(before) == 'table' then return nil, before end
    local count = (before == '0' or string.find(before, '^%-?[1-9]%d*$')) and tonumber(before)
    if not count or count + 1 >= 9007199254740992 then
      redis.call('SET', counter, before)
      return nil
    elseif count + 1 > tonumber(token) then
      token = string.format('%.0f', count + 1)
      redis.call('SET', counter, token)
    end
  end
  return token
end

-- A semaphore's freed permits, to the first live waiters in line whose takes fit, in order
-- (see the top; KEYS: holds, hold data, value, line, fence, line data). sort: the name's
-- ('permits:N'), read before the release. True when it told whom it had to: those it served,
-- or nobody while the first live waiter's take does not fit yet (a later release serves it,
-- and a waiter outside the line, woken, would meet the line). False: wake every waiter.
local function hand_on(sort)
  local n = sort and tonumber(string.match(sort, '^permits:(%d+)$'))
  if not n or not KEYS[6] or redis.call('EXISTS', KEYS[4]) == 0 then return false end
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local free = n
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')) do
    if member == '~min_hold' or member == '~lock_delay' then return false end  -- the waiters meet it
    if string.byte(member, 1) ~= 126 then
      free = free - (tonumber(redis.call('HGET', KEYS[2], member .. ' k') or '1') or 1)
    end
  end
  if free <= 0 then return false end
  local gone, granted, waiting = {}, {}, false
  for _, waiter in ipairs(redis.call('ZRANGE', KEYS[4], 0, 15)) do
    local entry = redis.call('HGET', KEYS[6], waiter)
    local t, span, lease, holder
    if entry then t, span, lease, holder = string.match(entry, '^(%d+) (%d+) (%d+) (.+)$') end
    if not (t and tonumber(t) + tonumber(span) > now_ms and (lease == '0' or tonumber(t) + tonumber(lease) > now_ms)) then
      gone[#gone + 1] = waiter  -- its place or lease ran out
    else
      local wants = tonumber(redis.call('HGET', KEYS[6], waiter .. ' k') or '1') or 1
      if wants > free then  -- it waits first: nobody behind it goes ahead
        waiting = true
        break
      end
      local token = issue_token(KEYS[5], now)
      if not token then break end
      redis.call('ZADD', KEYS[1], lease == '0' and 'inf' or string.format('%.0f', tonumber(t) + tonumber(lease)), holder)
      redis.call('HSET', KEYS[2], holder, token, '~sort', sort)
      if wants > 1 then redis.call('HSET', KEYS[2], holder .. ' k', wants, '~take', '1') end
      local stored = redis.call('HGET', KEYS[6], waiter .. ' v')
      if stored then redis.call('HSET', KEYS[3], holder, stored) end
      free = free - wants
      gone[#gone + 1] = waiter
      granted[#granted + 1] = 'grant:' .. waiter .. ':' .. token
    end
  end
  for _, waiter in ipairs(gone) do
    redis.call('ZREM', KEYS[4], waiter)
    redis.call('HDEL', KEYS[6], waiter, waiter .. ' v', waiter .. ' k')
  end
  if #granted == 0 then return waiting end
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
  for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3]}) do
    if last == 'inf' then redis.call('PERSIST', key) else redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(last) + 1)) end
  end
  for _, message in ipairs(granted) do publish(message) end
  if free > 0 and redis.call('ZCARD', KEYS[4]) == 0 then publish('released') end
  return true
end

if ARGV[4] == 'exclusive' then
  local leaving = ARGV[5] or ''
  local vkey = KEYS[6]  -- nil when no value is involved
  -- A waiter leaving the line names every key, the value key too: no {3} follows this write.
  if leaving ~= '' and redis.call('ZREM', KEYS[2], leaving) == 1 then redis.call('HDEL', KEYS[4], leaving, leaving .. ' v') end
  if redis.pcall('GET', KEYS[1]) ~= owner then
    return 0
  end
  if given_back then redis.call('ZREM', KEYS[#KEYS], '~min_hold', '~lock_delay') end
  if ruled and min_hold_stands(KEYS[#KEYS]) then
    -- Closed until the min hold ends: the marker, with no owner, is what stays.
    redis.call('DEL', KEYS[1])
    if has_value and vkey then redis.call('DEL', vkey) end
    publish('released')
    return 1
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
    -- Read first, written after: the places to drop, and the live one.
    local gone, next_id, t, lease, next_owner = {}
    for _, id in ipairs(line) do
      local entry = redis.call('HGET', KEYS[4], id)
      local et, es, el, eo
      if entry then et, es, el, eo = string.match(entry, '^(%d+) (%d+) (%d+) (.+)$') end
      if et and tonumber(et) + tonumber(es) > now_ms and (el == '0' or tonumber(et) + tonumber(el) > now_ms) then
        next_id, t, lease, next_owner = id, et, el, eo
        break
      end
      gone[#gone + 1] = id
    end
    local next_value = next_id and redis.call('HGET', KEYS[4], next_id .. ' v')
    -- Its value is stored with the lock it is handed: that needs the value key.
    if next_value and not vkey then return {3} end
    -- Its token, issued before the line is written to, as acquire.lua's next_token issues one
    -- (KEYS[3] is the counter here): it takes the clock's value, or counter + 1 when the
    -- counter is not below the clock. Past
    -- 2^53 - 1 no token is issued: nothing is handed over. The lock is freed and every waiter
    -- woken; their own attempts meet the refusal.
    local token
    if next_id then
      local failed
      token, failed = issue_token(KEYS[3], now)
      if failed then return failed end  -- another type: the line is as it was
    end
    if next_id then gone[#gone + 1] = next_id end
    local fields = {}
    for _, id in ipairs(gone) do
      fields[#fields + 1] = id
      fields[#fields + 1] = id .. ' v'
    end
    if #gone > 0 then
      redis.call('ZREM', KEYS[2], unpack(gone))
      redis.call('HDEL', KEYS[4], unpack(fields))
    end
    if token then
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
      publish('grant:' .. next_id .. ':' .. token)
      return 1
    end
  end
  redis.call('DEL', KEYS[1])
  if has_value and vkey then redis.call('DEL', vkey) end
else
  local leaving = ARGV[5] or ''
  if leaving ~= '' and KEYS[6] and redis.call('ZREM', KEYS[4], leaving) == 1 then
    redis.call('HDEL', KEYS[6], leaving, leaving .. ' v', leaving .. ' k')
  end
  local sort = KEYS[6] and redis.pcall('HGET', KEYS[2], '~sort')
  if type(sort) ~= 'string' then sort = nil end
  local vkey = has_value and KEYS[3] or nil
  local expiry = redis.pcall('ZSCORE', KEYS[1], owner)
  if type(expiry) ~= 'string' then
    -- A waiter that leaves may have been what the others waited behind.
    if leaving ~= '' and not hand_on(sort) then publish('released') end
    return 0
  end
  local now = now_ms()
  -- Its job rules (acquire.lua: kept in the hold data until the hold ends).
  local min_end, hold_delay
  local rules = redis.call('HGET', KEYS[2], owner .. ' r')
  if rules then min_end, hold_delay = string.match(rules, '^(%d+) (%d+)$') end
  local late = expiry ~= 'inf' and tonumber(expiry) <= now
  redis.call('ZREM', KEYS[1], owner)
  redis.call('HDEL', KEYS[2], owner, owner .. ' r', owner .. ' k')
  if vkey then redis.call('HDEL', vkey, owner) end
  if min_end and not given_back then
    -- A release is a clean end: the min hold left stays. A late one (its lease had run out)
    -- was an unclean end: its lock-delay too, from when the lease ran out.
    if tonumber(min_end) > now then redis.call('ZADD', KEYS[1], 'GT', min_end, '~min_hold') end
    local delay_end = tonumber(expiry == 'inf' and '0' or expiry) + tonumber(hold_delay)
    if late and tonumber(hold_delay) > 0 and delay_end > now then
      redis.call('ZADD', KEYS[1], 'GT', string.format('%.0f', delay_end), '~lock_delay')
    end
  end
  -- What is left: the hold data and values go with the last hold; the keys end with the last
  -- score (a hold's expiry, a marker's end) so that nothing is left behind.
  local markers = 0
  for _, m in ipairs({'~min_hold', '~lock_delay', '~keep'}) do
    if redis.call('ZSCORE', KEYS[1], m) then markers = markers + 1 end
  end
  local count = redis.call('ZCARD', KEYS[1])
  if count == markers then
    redis.call('DEL', KEYS[2], vkey or KEYS[2])
    redis.call('ZREM', KEYS[1], '~keep')
    if count == 0 or redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1]) end
  end
  if redis.call('EXISTS', KEYS[1]) == 1 then
    local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
    for _, key in ipairs({KEYS[1], KEYS[2], vkey}) do
      if last == 'inf' then redis.call('PERSIST', key) else redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(last) + 1)) end
    end
  end
  if late then return 0 end  -- its lease had run out: it was not held any more
  if hand_on(sort) then return 1 end
end
publish('released')
return 1
