-- Acquire several names in one call, all or none: dlock_acquire_many where one server keeps
-- every name (one Redis, or the master Sentinel follows). Not a script on its own: it is loaded
-- after acquire.lua and release.lua, each wrapped as a function of its own KEYS and ARGV,
-- acquire_one and release_one (src/redis/wire/scripts.cc), so that each name goes through
-- exactly what a single acquire or release runs.
-- ARGV[1] n, how many names, in the order they are taken. Name k (from 0):
--   KEYS[8k+1..8k+8] acquire.lua's keys, every one, the value key last;
--   ARGV[11k+2..11k+11] acquire.lua's ten arguments (its ARGV[7] '1': the value key is named);
--   ARGV[11k+12] its release channel: a give-back wakes its waiters there (PUBLISH).
-- Returns {1, reply 1, ..., reply n} when every name was acquired, each reply acquire.lua's
-- ({1, token}; {1, token, pttl} on a retry after a lost reply); {0, k, reply k} when name k
-- was not ({0, pttl}, {2, ...} or {4, ...}) and the names before it were given back, as a
-- release of an acquire that did not happen (release.lua's ARGV[7] '2': no job rule's marker
-- stays); acquire.lua's error reply the same way.
local n = tonumber(ARGV[1])

local function slice(t, from, count)
  local out = {}
  for i = 1, count do out[i] = t[from + i] end
  return out
end

-- Name k's hold, as release.lua takes it (see its keys).
local function give_back(k)
  local keys, args = slice(KEYS, 8 * (k - 1), 8), slice(ARGV, 1 + 11 * (k - 1), 11)
  local has_value = args[6] ~= '' and '1' or '0'
  if args[3] == 'exclusive' then
    -- holder, line, fence, line data, writer, value, holds, hold data
    release_one({keys[1], keys[6], keys[2], keys[7], keys[5], keys[8], keys[3], keys[4]},
                {args[1], args[11], '0', 'exclusive', '', has_value, '2'})
  elseif args[3] ~= 'shared' then
    -- a semaphore's: holds, hold data, value, line, fence, line data
    release_one({keys[3], keys[4], keys[8], keys[6], keys[2], keys[7]},
                {args[1], args[11], '0', 'hold', '', has_value, '2'})
  else
    -- a shared hold's: a semaphore's, then the holder and the writer announcement
    release_one({keys[3], keys[4], keys[8], keys[6], keys[2], keys[7], keys[1], keys[5]},
                {args[1], args[11], '0', 'hold', '', has_value, '2'})
  end
end

local replies = {1}
for k = 1, n do
  local reply = acquire_one(slice(KEYS, 8 * (k - 1), 8), slice(ARGV, 1 + 11 * (k - 1), 10))
  if reply.err or reply[1] ~= 1 then
    for j = k - 1, 1, -1 do give_back(j) end
    if reply.err then return reply end
    return {0, k, reply}
  end
  replies[k + 1] = reply
end
return replies
