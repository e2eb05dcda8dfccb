-- Raise lock NAME's fence counter to at least a token (Redlock, redlock://): a quorum of
-- masters issued the token, and it is written back to the masters that granted it before it
-- is handed out, so that every later quorum, which shares at least one master with this one,
-- issues a greater token (acquire.lua takes the counter + 1 as its least). A shared hold's
-- token is set too, so that every master that granted it names it alike (dlock_inspect).
-- KEYS[1] fence counter <prefix>{NAME}:fence; KEYS[2] hold data <prefix>{NAME}:holdinfo
-- ARGV[1] the token (decimal); ARGV[2] a shared hold's owner value, '' for the exclusive one.
-- Returns 1; an error reply naming the limit, having written nothing, for a token past
-- 2^53 - 1 (acquire.lua issues none: one such came from a master that is broken or hostile,
-- and written back it would stop the name on every master).
local token = tonumber(ARGV[1])
if not token or token >= 9007199254740992 then  -- 2^53: Lua numbers are exact below it
  return redis.error_reply('dlock: fencing token ' .. ARGV[1] .. ' is past 2^53 - 1 ' ..
                           '(9007199254740991), the greatest token dlock issues: refused')
end
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if current < token then redis.call('SET', KEYS[1], ARGV[1]) end
if ARGV[2] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
end
return 1
