-- Ask the holders of a lock to let go (dlock_request_release): publishes the request on the
-- lock's release channel, where each holder that asked to hear of requests listens. Nothing is
-- taken: a holder may release, or ignore it.
-- KEYS[1] holder; KEYS[2] holds (see acquire.lua)
-- ARGV[1] the release channel <prefix>{NAME}:released; ARGV[2] '1' to publish sharded (see
-- release.lua); ARGV[3] the message: 'request\n' .. request id .. '\n' .. reason
-- Returns how many holds were asked (0 = nobody holds the name: nothing is published).
local held = 0
local owner = redis.pcall('GET', KEYS[1])
if type(owner) == 'string' and string.byte(owner, 1) ~= 126 then  -- '~': a marker, no owner
  held = 1
else
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local holds = redis.pcall('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%.0f', now_ms), '+inf')
  if type(holds) == 'table' then
    for i = 1, #holds do
      if string.byte(holds[i], 1) ~= 126 then held = held + 1 end
    end
  end
end
if held == 0 then return 0 end
if ARGV[2] == '1' then
  redis.call('SPUBLISH', ARGV[1], ARGV[3])
else
  redis.call('PUBLISH', ARGV[1], ARGV[3])
end
return held
