-- Release a hold by this owner and serve the lock's line: the first live fair waiters are handed
-- what was freed, and only they are told; with nobody in line every waiter is woken.
-- KEYS, by the hold's kind (a call names a prefix of its list; a key named but missing makes
-- Redis Cluster refuse a script while its slot migrates, TRYAGAIN, so the common case names
-- only what it may use, and the script answers {3}, having written nothing, when it needs more):
-- - the exclusive hold: holder, line, fence, line data, writer announcement, value, holds, hold
--   data. Its release names the first five, and the value key when the hold has one; a hold
--   with job rules, a waiter leaving the line and a call answered {3} name all eight.
-- - a shared hold: holds, hold data, value, line, fence, line data, holder, writer. Its release
--   names the first four; the script asks for all eight when someone waits in line.
-- - a semaphore's hold: holds, hold data, value, line, fence, line data.
-- (The keys are acquire.lua's.)
-- ARGV[1] owner value; ARGV[2] release channel <prefix>{NAME}:released; ARGV[3] "1" to publish
-- on the sharded channel (Redis Cluster: SPUBLISH reaches the slot's nodes only, where PUBLISH
-- goes to every node of the cluster); ARGV[4] 'exclusive' or 'hold' (shared or semaphore);
-- ARGV[5] a fair waiter's id that leaves the line (with every key): it stopped waiting, and
-- what was handed to it meanwhile is released and handed on ('' or absent: none); ARGV[6] '1'
-- when the hold has a value to remove; ARGV[7] '1' when the hold has job rules (a min hold, a
-- lock-delay: acquire.lua's markers), '2' when such a hold is given back (an acquire that did
-- not happen: an exclusive one's markers go with it).
-- A lock's line (exclusive and shared waiters, serve_lock_line) is served in order: an
-- exclusive waiter once nothing is held, shared waiters while no exclusive hold stands, up to
-- the first exclusive waiter. A semaphore's (hand_on) goes to the first live waiters whose
-- takes fit, in order. Each one served gets a token and what is left of the lease it asked
-- for, counted from its last attempt, and is told ('grant:ID:TOKEN'). Not while a job rule's
-- marker stands: the waiters, woken ('released'), meet it. A release is a clean end: the
-- lock-delay marker goes once no hold stands; a min hold marker that still stands keeps the
-- name closed.
-- Returns 1 when released, 0 when this owner no longer held it, {3} as above.
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

-- The line of a lock (exclusive and shared waiters, acquire.lua), served from its head: the
-- first live waiter, and when it waits for shared holds, every live shared waiter after it up
-- to the first exclusive one (readers ahead of a writer go in together; readers behind it wait:
-- the writer preference). An exclusive waiter is served only when nothing is held, a shared one
-- while no exclusive hold stands. Each gets a token and what is left of the lease it asked for
-- counted from its last attempt, and is told ('grant:ID:TOKEN'). K names the keys (holder,
-- line, fence, linedata, writer, value, holds, holddata: some may be nil). after_grants, when
-- given, is this release's own write (the exclusive holder's), made once nothing can refuse,
-- after the grants: it is told what was served (nil, 'exclusive' or 'shared'). (A script
-- must not touch a key it deleted while its slot migrates: Redis Cluster then refuses the
-- access half-way, the writes before it made.)
-- Returns 'asked' (nothing written) when it needs a key not named; an error reply when the
-- counter is another type (nothing written); true when it told whom it had to (those served,
-- or nobody while the first live waiter waits for holds to end); false when nobody waits in
-- line (then every waiter outside it is woken).
local function serve_lock_line(K, after_grants)
  local line = K.line and redis.call('ZRANGE', K.line, 0, 15) or {}
  if #line == 0 then  -- the common case: nobody in line
    if after_grants then after_grants(nil) end
    return false
  end
  if not (K.fence and K.linedata and K.writer) then return 'asked' end
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  -- What stands: an exclusive holder (this release's own is going), a closing marker, the live
  -- shared holds.
  local exclusive_held = not after_grants and K.holder and redis.call('EXISTS', K.holder) == 1
  local shared_held = 0
  if K.holds and redis.call('EXISTS', K.holds) == 1 then
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', K.holds, '(' .. now_ms, '+inf')) do
      if member == '~min_hold' or member == '~lock_delay' then line = {} break end  -- the waiters meet it
      if string.byte(member, 1) ~= 126 then shared_held = shared_held + 1 end
    end
  end
  -- Read first, written after: the places to drop, and those served.
  local gone, plan, waiting = {}, {}, false
  for _, id in ipairs(line) do
    -- Its entry, whether it waits for a shared hold, and its value: one call.
    local fields = redis.call('HMGET', K.linedata, id, id .. ' s', id .. ' v')
    local entry, shared, value = fields[1], fields[2] ~= false, fields[3]
    local t, span, lease, holder
    if entry then t, span, lease, holder = string.match(entry, '^(%d+) (%d+) (%d+) (.+)$') end
    if not (t and tonumber(t) + tonumber(span) > now_ms and (lease == '0' or tonumber(t) + tonumber(lease) > now_ms)) then
      gone[#gone + 1] = id  -- its place or lease ran out
    else
      if exclusive_held or (not shared and (shared_held > 0 or #plan > 0)) then
        waiting = true  -- it waits first: nobody behind it goes ahead
        break
      end
      if (shared and not (K.holds and K.holddata)) or (value and not K.value) then return 'asked' end
      plan[#plan + 1] = {id = id, t = t, lease = lease, holder = holder, shared = shared, value = value}
      if not shared then break end
      shared_held = shared_held + 1
    end
  end
  -- The first token before any write: a counter of another type leaves everything as it was.
  local first
  if #plan > 0 then
    local failed
    first, failed = issue_token(K.fence, now)
    if failed then return failed end
  end
  local granted, served = {}, nil
  for k, next in ipairs(plan) do
    local token = k == 1 and first or issue_token(K.fence, now)
    if not token then break end  -- past 2^53 - 1: the waiters left, woken, meet the refusal
    local until_ms = string.format('%.0f', tonumber(next.t) + tonumber(next.lease))
    if next.shared then
      redis.call('ZADD', K.holds, next.lease == '0' and 'inf' or until_ms, next.holder)
      redis.call('HSET', K.holddata, next.holder, token, '~sort', 'shared')
      if next.value then redis.call('HSET', K.value, next.holder, next.value) end
    else
      if next.lease == '0' then
        redis.call('SET', K.holder, next.holder)
      else
        redis.call('SET', K.holder, next.holder, 'PXAT', until_ms)
      end
      -- The next holder's own value, expiring with it.
      if next.value then
        redis.call('HSET', K.value, next.holder, next.value)
        if next.lease ~= '0' then redis.call('PEXPIREAT', K.value, until_ms) end
      end
      if redis.call('GET', K.writer) == next.holder then redis.call('DEL', K.writer) end
    end
    gone[#gone + 1] = next.id
    granted[#granted + 1] = 'grant:' .. next.id .. ':' .. token
    served = next.shared and 'shared' or 'exclusive'
  end
  if after_grants then after_grants(served) end
  if #gone > 0 then
    local fields = {}
    for _, id in ipairs(gone) do
      for _, suffix in ipairs({'', ' v', ' k', ' s'}) do fields[#fields + 1] = id .. suffix end
    end
    redis.call('ZREM', K.line, unpack(gone))
    redis.call('HDEL', K.linedata, unpack(fields))
  end
  if #granted > 0 and K.holds and redis.call('EXISTS', K.holds) == 1 then
    -- Shared holds served: their keys end with the last hold's lease, as acquire.lua's do.
    local last = redis.call('ZRANGE', K.holds, -1, -1, 'WITHSCORES')[2]
    for _, key in ipairs({K.holds, K.holddata, K.value}) do
      if last == 'inf' then redis.call('PERSIST', key) else redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(last) + 1)) end
    end
  end
  for _, message in ipairs(granted) do publish(message) end
  return #granted > 0 or waiting
end

-- serve_lock_line's keys, as an exclusive hold's release names them.
local function exclusive_keys()
  return {holder = KEYS[1], line = KEYS[2], fence = KEYS[3], linedata = KEYS[4], writer = KEYS[5],
          value = KEYS[6], holds = KEYS[7], holddata = KEYS[8]}
end

if ARGV[4] == 'exclusive' then
  local leaving = ARGV[5] or ''
  local vkey = KEYS[6]  -- nil when no value is involved
  -- The holder's own key and value go; served: who was served in its place (serve_lock_line),
  -- whose writes stay.
  local function let_go(served)
    if served ~= 'exclusive' then redis.call('DEL', KEYS[1]) end
    if has_value and vkey then
      if served then redis.call('HDEL', vkey, owner) else redis.call('DEL', vkey) end
    end
  end
  -- A waiter leaving the line names every key: no {3} follows this write. Its announcement
  -- goes with it, and what it kept waiting may be served now.
  if leaving ~= '' and redis.call('ZREM', KEYS[2], leaving) == 1 then
    redis.call('HDEL', KEYS[4], leaving, leaving .. ' v', leaving .. ' s')
    if redis.call('GET', KEYS[5]) == owner then redis.call('DEL', KEYS[5]) end
  end
  if redis.pcall('GET', KEYS[1]) ~= owner then
    if leaving ~= '' then
      local served = serve_lock_line(exclusive_keys(), nil)
      if type(served) == 'table' then return served end
    end
    return 0
  end
  if given_back then redis.call('ZREM', KEYS[7], '~min_hold', '~lock_delay') end
  if ruled and min_hold_stands(KEYS[7]) then
    -- Closed until the min hold ends: the marker, with no owner, is what stays.
    let_go()
    publish('released')
    return 1
  end
  if not KEYS[2] or redis.call('EXISTS', KEYS[2]) == 0 then  -- the common case: nobody in line
    let_go()
    publish('released')
    return 1
  end
  local served = serve_lock_line(exclusive_keys(), let_go)
  if served == 'asked' then return {3} end
  if type(served) == 'table' then return served end  -- the counter is another type: as it was
  if served then return 1 end
else
  -- A shared hold's release given its first four keys: the rest when someone waits in line.
  if #KEYS == 4 and redis.call('EXISTS', KEYS[4]) == 1 then return {3} end
  local leaving = ARGV[5] or ''
  if leaving ~= '' and KEYS[6] and redis.call('ZREM', KEYS[4], leaving) == 1 then
    redis.call('HDEL', KEYS[6], leaving, leaving .. ' v', leaving .. ' k', leaving .. ' s')
  end
  local sort = KEYS[6] and not KEYS[8] and redis.pcall('HGET', KEYS[2], '~sort')  -- a semaphore's
  if type(sort) ~= 'string' then sort = nil end
  -- A shared hold's line is the lock's (KEYS[7] and KEYS[8] named: serve_lock_line); a
  -- semaphore's is its permits' (hand_on). True when it told whom it had to.
  local function serve()
    if not KEYS[8] then return hand_on(sort) end
    if redis.call('EXISTS', KEYS[4]) == 0 then return false end  -- the common case: nobody in line
    return serve_lock_line({holds = KEYS[1], holddata = KEYS[2], value = KEYS[3], line = KEYS[4],
                            fence = KEYS[5], linedata = KEYS[6], holder = KEYS[7], writer = KEYS[8]}, nil)
  end
  local vkey = has_value and KEYS[3] or nil
  local expiry = redis.pcall('ZSCORE', KEYS[1], owner)
  if type(expiry) ~= 'string' then
    -- A waiter that leaves may have been what the others waited behind.
    if leaving ~= '' then
      local served = serve()
      if type(served) == 'table' then return served end
      if not served then publish('released') end
    end
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
  -- What it freed goes to the line either way; a late release (its lease had run out) answers
  -- 0: it was not held any more.
  local served = serve()
  if type(served) == 'table' then return served end
  if late then
    if not served then publish('released') end
    return 0
  end
  if served then return 1 end
end
publish('released')
return 1
