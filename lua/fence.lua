-- Raise lock NAME's fence counter to at least a token (Redlock, redlock://): a quorum of
-- masters issued the token, and it is written back to the masters that granted it before it
-- is handed out, so that every later quorum, which shares at least one master with this one,
-- issues a greater token (acquire.lua takes the counter + 1 as its least).
-- KEYS[1] fence counter <prefix>{NAME}:fence; ARGV[1] the token (decimal). Returns 1.
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if current < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
