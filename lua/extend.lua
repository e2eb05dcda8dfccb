-- Renew (heartbeat) or change the lease of a lock held by this owner.
-- KEYS[1] holder key; ARGV[1] owner value; ARGV[2] new lease in ms, "0" = no expiry
-- Returns 1 when renewed, 0 when this owner no longer holds it.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '0' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
