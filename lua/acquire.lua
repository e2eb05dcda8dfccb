-- Acquire a hold on lock NAME and issue its fencing token: the exclusive hold, a shared hold, or
-- one of n permits of a semaphore.
-- KEYS[1] holder <prefix>{NAME}: the exclusive holder's owner value, expiring with its lease
-- KEYS[2] fence counter <prefix>{NAME}:fence (never expires)
-- KEYS[3] holds <prefix>{NAME}:holds: sorted set of the shared or semaphore holders' owner
--         values, scored by when each expires in server ms ('inf' = never)
-- KEYS[4] hold data <prefix>{NAME}:holdinfo: hash, owner value -> token, and '~sort' -> 'shared'
--         or 'permits:N' (owner values start with hex digits: no owner is '~sort')
-- KEYS[5] writer announcement <prefix>{NAME}:writer: a waiting exclusive acquire's owner value,
--         expiring after its queue span; while it stands no new shared hold is granted
-- KEYS[6] line <prefix>{NAME}:line: sorted set of fair waiters' ids, scored by arrival (server
--         µs); KEYS[7] <prefix>{NAME}:linedata: hash, id -> "T SPAN LEASE OWNER": the waiter's
--         last attempt in server ms, how long its place lasts after that, its lease and owner
--         value (release.lua hands the lock to the first live one), and id .. ' v' -> the
--         value it asked to store, when it has one
-- The value key <prefix>{NAME}:value, last of KEYS when ARGV[7] is '1': hash, owner value ->
--         the value stored with that hold (dlock_options_set_value); it expires with the
--         exclusive holder, or with the last shared or semaphore hold, as KEYS[3] and KEYS[4]
-- ARGV[1] owner value (128-bit random token, optionally "|label"); ARGV[2] lease in ms, '0' =
-- none; ARGV[3] 'exclusive', 'shared' or 'permits:N'; ARGV[4] how long a refused exclusive
-- acquire announces itself waiting, ms ('0': it will not wait); ARGV[5] a fair waiter's id
-- ('' or absent: not in line); ARGV[6] the value to store with the hold ('' or absent: none);
-- ARGV[7] '1' when the last key is the value key; ARGV[8] min hold, ms ('0' or absent: none);
-- ARGV[9] lock-delay, ms ('0' or absent: none); ARGV[10] how many permits a semaphore hold
-- takes ('1' or absent: one)
-- A semaphore hold that takes k > 1 permits keeps k in the hold data (owner .. ' k' -> k), and
-- '~take' -> '1' marks that some hold does: the permits in use are then the sum of the holds'
-- takes rather than their count.
-- Semaphores wait in line too: a refused semaphore acquire with a waiter's id takes its place
-- (id .. ' k' -> its take, when more than 1), and while a live waiter stands in line no other
-- acquire takes permits before it (a large take is not overtaken by small ones);
-- release.lua hands freed permits to the first live waiters whose takes fit, in order.
-- Semaphore calls name the line keys (KEYS[6], KEYS[7]) always, waiter or not.
-- Shared and exclusive waiters share the lock's line (id .. ' s' -> '1' marks a shared one): a
-- refused acquire with a waiter's id takes its place, whatever stood in its way, and a shared
-- one also waits behind a live exclusive waiter ahead of it (the writer preference);
-- release.lua serves the line in order.
-- Job rules live in the holds key as markers with no owner: members '~min_hold' and
-- '~lock_delay' (owner values start with hex digits), scored by when they end in server ms.
-- While one stands and no hold does, the name is closed: {4, ms left, 'min_hold' or
-- 'lock_delay'}. The exclusive hold marks them when won: acquire + min hold, and lease +
-- delay (extend.lua moves it with each renewal; release.lua removes it: a clean end). A shared
-- or semaphore hold keeps its rules in the hold data (owner .. ' r' -> 'MIN_END DELAY'), and
-- marks them when it ends: its release the min hold left, its expiry (found below, or by its
-- own late release) both; '~keep', scored by its last rule's end, keeps the keys until then
-- and closes nothing. Any call naming the holds key goes through the slow path below.
-- Returns {1, token} when acquired (token as a decimal string), {1, token, pttl} when it was
-- already this owner's (a retry after a lost reply, or a hand-over: a fresh token, and pttl is
-- what is left of its lease, -1 none); {0, pttl} when refused (ms until the first hold in the way may end, -1
-- when none of them expires); {2, sort held, sort asked} when the name is held as the other
-- sort ('lock' or 'permits:N'); {4, pttl, by} when a marker with no holder closes the name
-- (the holder key holds '~' .. by, e.g. '~broken', until it expires: break.lua); {3} when
-- called with KEYS[1..3] alone and it needs them all;
-- an error reply naming the limit, having written nothing, when the counter is at 2^53 - 1 or
-- past it.
local owner, lease, sort, queue = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local id = ARGV[5] or ''
local value = ARGV[6] or ''
local vkey = ARGV[7] == '1' and KEYS[#KEYS] or nil
local min_hold, delay = tonumber(ARGV[8] or '0') or 0, tonumber(ARGV[9] or '0') or 0
local take = tonumber(ARGV[10] or '1') or 1
if lease == '0' then delay = 0 end  -- a hold that never expires never ends uncleanly

local function ms(x) return string.format('%.0f', x) end  -- no exponent: Lua would print 1.7e+12
local function now_ms_of(now) return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) end

-- The holds key lives until its last score (a hold's expiry or a marker's end).
local function holds_live_until_last(keys)
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
  for _, key in ipairs(keys) do
    if last == 'inf' then redis.call('PERSIST', key) else redis.call('PEXPIREAT', key, ms(tonumber(last) + 1)) end
  end
end

-- A won exclusive hold's job rules, as markers (the longest stands: GT).
local function mark_rules(now_ms)
  if min_hold == 0 and delay == 0 then return end
  if min_hold > 0 then redis.call('ZADD', KEYS[3], 'GT', ms(now_ms + min_hold), '~min_hold') end
  if delay > 0 then redis.call('ZADD', KEYS[3], 'GT', ms(now_ms + tonumber(lease) + delay), '~lock_delay') end
  holds_live_until_last({KEYS[3]})
end

-- A won shared or semaphore hold's job rules, kept with it until it ends (see the top).
local function keep_rules(now_ms)
  if min_hold == 0 and delay == 0 then return end
  local min_end = min_hold > 0 and now_ms + min_hold or 0
  redis.call('HSET', KEYS[4], owner .. ' r', ms(min_end) .. ' ' .. delay)
  local last = math.max(min_end, delay > 0 and now_ms + tonumber(lease) + delay or 0)
  redis.call('ZADD', KEYS[3], 'GT', ms(last), '~keep')
end

-- The markers a shared or semaphore hold leaves when it ends uncleanly at `ended` (its lease
-- ran out): its min hold's end and ended + its delay, those still to come.
local function mark_unclean_end(member, ended, now_ms)
  local rules = redis.call('HGET', KEYS[4], member .. ' r')
  if not rules then return end
  redis.call('HDEL', KEYS[4], member .. ' r')
  local min_end, hold_delay = string.match(rules, '^(%d+) (%d+)$')
  if not min_end then return end
  if tonumber(min_end) > now_ms then redis.call('ZADD', KEYS[3], 'GT', min_end, '~min_hold') end
  local delay_end = ended + tonumber(hold_delay)
  if tonumber(hold_delay) > 0 and delay_end > now_ms then redis.call('ZADD', KEYS[3], 'GT', ms(delay_end), '~lock_delay') end
end

-- The exclusive holder's value: stored afresh (any other field is a stale one), expiring with
-- the holder key, which the caller has just written.
local function store_exclusive_value()
  if not vkey then return end
  redis.call('DEL', vkey)
  if value == '' then return end
  redis.call('HSET', vkey, owner, value)
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('PEXPIRE', vkey, ttl) end
end

-- Tokens stay below 2^53: Lua numbers (doubles) hold every integer only that far, and the
-- scripts compare tokens as numbers. A counter at the limit (or set past it by hand, or by a
-- broken Redlock master) is refused, never passed: the counter is left as it was.
local LIMIT = 9007199254740992  -- 2^53

-- Server time in microseconds, as a decimal string, from TIME's reply.
local function micros(now)
  local us = now[2]
  if #us < 6 then us = string.rep('0', 6 - #us) .. us end  -- cheaper than string.format
  return now[1] .. us
end

-- Takes a place in line under id (kept on a retry), or renews it: it lasts `queue` ms from now,
-- with what the hand-over needs (release.lua): the attempt's time, the span, the lease, the
-- owner value, and the value and take when there are.
local function join_line(now)
  if id == '' or queue == '0' then return end
  redis.call('ZADD', KEYS[6], 'NX', micros(now), id)
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('HSET', KEYS[7], id, string.format('%.0f', now_ms) .. ' ' .. queue .. ' ' .. lease .. ' ' .. owner)
  if value ~= '' then redis.call('HSET', KEYS[7], id .. ' v', value) end
  if take > 1 then redis.call('HSET', KEYS[7], id .. ' k', take) end
  if sort == 'shared' then redis.call('HSET', KEYS[7], id .. ' s', '1') end
  -- The line ends with its last place, so that a crowd that crashed leaves nothing.
  for k = 6, 7 do redis.call('PEXPIRE', KEYS[k], queue, 'GT') redis.call('PEXPIRE', KEYS[k], queue, 'NX') end
end

-- How long a waiter's place in line lasts, when it is live (its place and lease not run out).
local function place_left(waiter, now_ms)
  local entry = redis.call('HGET', KEYS[7], waiter)
  local t, span, held_for
  if entry then t, span, held_for = string.match(entry, '^(%d+) (%d+) (%d+) ') end
  if t and tonumber(t) + tonumber(span) > now_ms and (held_for == '0' or tonumber(t) + tonumber(held_for) > now_ms) then
    return tonumber(t) + tonumber(span) - now_ms
  end
  return nil
end

-- The first live waiter in line, and how long its place lasts; nil when none of the first 16
-- is live.
local function first_in_line(now_ms)
  for _, waiter in ipairs(redis.call('ZRANGE', KEYS[6], 0, 15)) do
    local left = place_left(waiter, now_ms)
    if left then return waiter, left end
  end
  return nil
end

-- A shared waiter's: the first live exclusive waiter ahead of it in line, and how long its
-- place lasts; nil when there is none among the first 16, or when it is not in line (the
-- writer's announcement stands for those).
local function exclusive_ahead(now_ms)
  if id == '' or not KEYS[7] then return nil end
  for _, waiter in ipairs(redis.call('ZRANGE', KEYS[6], 0, 15)) do
    if waiter == id then return nil end
    local left = place_left(waiter, now_ms)
    if left and redis.call('HEXISTS', KEYS[7], waiter .. ' s') == 0 then return waiter, left end
  end
  return nil
end

-- The next fencing token, written to the counter and returned as a decimal string: max(counter
-- + 1, now_us). It rises across releases and expiries through the counter, and across a
-- restart that lost the counter through the clock. Tokens follow the clock, so the counter is
-- nearly always below it: one SET ... GET both moves it to the clock and reads what it held
-- (INCR and SET took two calls), and only a counter that is not below the clock is read as a
-- number. A plain SET also drops any expiry the counter was given by hand: it must never expire.
-- Returns nil and an error reply when the counter is not a decimal integer, not a string, or at
-- 2^53 - 1 or past it; a string is written back as it was (SET ... GET wrote it first).
local function next_token(now_us)
  local before = redis.pcall('SET', KEYS[2], now_us, 'GET')
  if not before or (#before == #now_us and before < now_us and string.find(before, '^[1-9]%d*$')) then
    return now_us
  end
  if type(before) == 'table' then return nil, before end  -- another type: nothing was written
  local counter = (before == '0' or string.find(before, '^%-?[1-9]%d*$')) and tonumber(before)
  if not counter or counter + 1 >= LIMIT then
    redis.call('SET', KEYS[2], before)
    if not counter then return nil, redis.error_reply('ERR value is not an integer or out of range') end
    return nil, redis.error_reply('dlock: the fencing counter ' .. KEYS[2] .. ' is at or past 2^53 - 1 ' ..
                                  '(9007199254740991), the greatest token dlock issues: refused')
  end
  if counter + 1 <= tonumber(now_us) then return now_us end
  local token = string.format('%.0f', counter + 1)  -- no exponent; exact below 2^53
  redis.call('SET', KEYS[2], token)
  return token
end

-- The common case first, in as few calls as it can take (the uncontended cycle's cost is mostly
-- these calls): an exclusive acquire, with no shared or semaphore holds under the name, tries to
-- take the holder key at once. A single try names only KEYS[1..3]; when holds stand in the way
-- it asks for all the keys ({3}) before it writes anything.
if sort == 'exclusive' and redis.call('EXISTS', KEYS[3]) == 0 then
  local prev
  if lease == '0' then
    prev = redis.pcall('SET', KEYS[1], owner, 'NX', 'GET')
  else
    prev = redis.pcall('SET', KEYS[1], owner, 'NX', 'PX', lease, 'GET')
  end
  local ours = prev == owner  -- a retry after a lost reply, or a hand-over it did not hear of
  if prev and not ours then  -- another holder (or a key of another type: not ours either)
    if queue ~= '0' then
      redis.call('SET', KEYS[5], owner, 'PX', queue)
      join_line(redis.call('TIME'))
    end
    if type(prev) == 'string' and string.byte(prev, 1) == 126 then  -- '~': a marker (break.lua)
      return {4, redis.call('PTTL', KEYS[1]), string.sub(prev, 2)}
    end
    return {0, redis.call('PTTL', KEYS[1])}
  end
  -- Won, or already ours: the next token (next_token). One already ours gets a fresh token
  -- too: the one it was given first never reached it (else it would not ask), and the counter
  -- may have moved since (lost, set back), so reading it back could hand out a token that does
  -- not rise. A counter that issues none must not leave the key set by a failed acquire.
  local token, refused = next_token(micros(redis.call('TIME')))
  if not token then
    if not ours then redis.call('DEL', KEYS[1]) end
    return refused
  end
  -- Only an acquire that waits can have announced itself (a single try sends queue '0').
  if queue ~= '0' and redis.call('GET', KEYS[5]) == owner then redis.call('DEL', KEYS[5]) end
  if id ~= '' and redis.call('ZREM', KEYS[6], id) == 1 then redis.call('HDEL', KEYS[7], id, id .. ' v', id .. ' s') end
  store_exclusive_value()
  if ours then return {1, token, redis.call('PTTL', KEYS[1])} end
  if min_hold > 0 or delay > 0 then mark_rules(now_ms_of(redis.call('TIME'))) end
  return {1, token}
end
if #KEYS < 5 then return {3} end

-- A refused exclusive acquire that will wait keeps new shared holds out (writer preference).
local function announce()
  if sort == 'exclusive' and queue ~= '0' then
    redis.call('SET', KEYS[5], owner, 'PX', queue)
  end
end
local function sort_of(s)
  if s == 'exclusive' or s == 'shared' then return 'lock' end
  return s
end

local ttl = redis.call('PTTL', KEYS[1])
if ttl ~= -2 then
  -- Already ours (a retry after a lost reply): same answer as the first time.
  local holder = redis.pcall('GET', KEYS[1])
  if holder == owner then
    return {1, redis.call('GET', KEYS[2])}
  end
  if type(holder) == 'string' and string.byte(holder, 1) == 126 then  -- '~': a marker
    announce()
    return {4, ttl, string.sub(holder, 2)}
  end
  if sort_of(sort) ~= 'lock' then return {2, 'lock', sort} end
  announce()
  join_line(redis.call('TIME'))
  return {0, ttl}
end

local now = redis.call('TIME')
local now_ms = now_ms_of(now)

-- The shared or semaphore holds, those whose lease ran out removed first.
local others = 0  -- live holds under the name besides this acquire
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- Holds whose lease ran out ended uncleanly: their rules' markers first (they may close the
  -- name), then they go, with the markers that ended.
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ms(now_ms), 'WITHSCORES')
  for i = 1, #gone, 2 do
    local g = gone[i]
    if string.byte(g, 1) ~= 126 then
      mark_unclean_end(g, tonumber(gone[i + 1]), now_ms)
      redis.call('HDEL', KEYS[4], g, g .. ' k')
      if vkey then redis.call('HDEL', vkey, g) end
    end
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms(now_ms)) end
  -- The markers that stand: the latest of the rules' says how long the name is closed.
  local markers, closed_until, closed_by = 0, 0, ''
  for _, rule in ipairs({'min_hold', 'lock_delay', 'keep'}) do
    local ends = redis.call('ZSCORE', KEYS[3], '~' .. rule)
    if ends then
      markers = markers + 1
      if rule ~= 'keep' and tonumber(ends) > closed_until then closed_until, closed_by = tonumber(ends), rule end
    end
  end
  local held = redis.call('ZCARD', KEYS[3]) - markers
  if held == 0 then
    redis.call('DEL', KEYS[4])  -- no hold stands: its sort and tokens went with it
    if closed_until > 0 then
      announce()
      return {4, closed_until - now_ms, closed_by}
    end
    redis.call('DEL', KEYS[3])
  else
    local held_sort = redis.call('HGET', KEYS[4], '~sort') or 'shared'
    if sort_of(held_sort) ~= sort_of(sort) then return {2, sort_of(held_sort), sort_of(sort)} end
    local mine = redis.call('HGET', KEYS[4], owner)
    if mine then
      -- A retry after a lost reply, or permits handed over in line (release.lua): what is left
      -- of its lease, which a hand-over counted from the waiter's last attempt.
      if id ~= '' and redis.call('ZREM', KEYS[6], id) == 1 then redis.call('HDEL', KEYS[7], id, id .. ' v', id .. ' k', id .. ' s') end
      local ends = redis.call('ZSCORE', KEYS[3], owner)
      return {1, mine, (not ends or ends == 'inf') and -1 or math.max(tonumber(ends) - now_ms, 0)}
    end
    -- The hint: when the first hold may end (markers, at most three, are not holds).
    local first
    local lowest = redis.call('ZRANGE', KEYS[3], 0, markers, 'WITHSCORES')
    for i = 1, #lowest, 2 do
      if string.byte(lowest[i], 1) ~= 126 then first = lowest[i + 1] break end
    end
    local wait = first == 'inf' and -1 or tonumber(first) - now_ms
    if sort == 'exclusive' then
      announce()
      join_line(now)
      return {0, wait}
    end
    if sort ~= 'shared' then
      -- The permits in use: one per hold, or each hold's take once one took more (see the top).
      local taken = held
      if redis.call('HEXISTS', KEYS[4], '~take') == 1 then
        taken = 0
        for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
          if string.byte(member, 1) ~= 126 then
            taken = taken + (tonumber(redis.call('HGET', KEYS[4], member .. ' k') or '1') or 1)
          end
        end
      end
      if taken + take > tonumber(string.sub(sort, 9)) then
        join_line(now)
        return {0, wait}
      end
    end
    others = held
  end
end
if sort == 'shared' then
  -- Writer preference: no new shared hold while an exclusive acquire waits, announced or in
  -- line ahead of this one (shared waiters ahead of it go in together: release.lua).
  local writer = redis.call('PTTL', KEYS[5])
  local ahead, left = exclusive_ahead(now_ms)
  if writer ~= -2 or ahead then
    join_line(now)
    return {0, ahead and left or writer}
  end
end

-- Room for a semaphore's permits, but not before a live waiter in line (unless it is that
-- waiter).
if sort ~= 'shared' and sort ~= 'exclusive' and KEYS[7] then
  local first, left = first_in_line(now_ms)
  if first and first ~= id then
    join_line(now)
    return {0, left}
  end
end

local token, refused = next_token(micros(now))
if not token then return refused end
if sort == 'exclusive' then
  if lease == '0' then
    redis.call('SET', KEYS[1], owner)
  else
    redis.call('SET', KEYS[1], owner, 'PX', lease)
  end
  -- Only an acquire that waits can have announced itself (a single try sends queue '0').
  if queue ~= '0' and redis.call('GET', KEYS[5]) == owner then redis.call('DEL', KEYS[5]) end
  if id ~= '' and redis.call('ZREM', KEYS[6], id) == 1 then redis.call('HDEL', KEYS[7], id, id .. ' v', id .. ' s') end
  store_exclusive_value()
  mark_rules(now_ms)
  return {1, token}
end
local expiry = lease == '0' and 'inf' or ms(now_ms + tonumber(lease))
redis.call('ZADD', KEYS[3], expiry, owner)
redis.call('HSET', KEYS[4], owner, token, '~sort', sort)
if take > 1 then redis.call('HSET', KEYS[4], owner .. ' k', take, '~take', '1') end
if id ~= '' and redis.call('ZREM', KEYS[6], id) == 1 then redis.call('HDEL', KEYS[7], id, id .. ' v', id .. ' k', id .. ' s') end
keep_rules(now_ms)
if vkey then
  if others == 0 then redis.call('DEL', vkey) end  -- no live hold: every field is stale
  if value ~= '' then redis.call('HSET', vkey, owner, value) end
end
-- Both keys end with the last hold's lease (or marker), so that crashed holders leave nothing
-- behind. Keys made just now have no expiry yet: a hold without one leaves them so.
local last = expiry
if others > 0 or min_hold > 0 or delay > 0 then
  last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
elseif last == 'inf' then
  return {1, token}
end
local ends = {KEYS[3], KEYS[4], vkey}
for _, key in ipairs(ends) do
  if last == 'inf' then redis.call('PERSIST', key) else redis.call('PEXPIREAT', key, ms(tonumber(last) + 1)) end
end
return {1, token}
