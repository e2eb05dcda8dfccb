-- A contender for the "two OS processes" test: N times, under the lock, reads "value token"
-- from a file, checks its own fencing token is greater than the last writer's, writes
-- "value+1 own_token". Prints DONE, or FAIL and a reason.
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path
local dlock = require("dlock")

local url, name, path, n = arg[1], arg[2], arg[3], tonumber(arg[4])
local client = assert(dlock.open(url))
for _ = 1, n do
  local lock, err = client:acquire(name, { lease_ms = 10000, wait_ms = -1 })
  if not lock then print("FAIL acquire: " .. err) os.exit(1) end
  local f = assert(io.open(path))
  local line = f:read("*l") or ""
  f:close()
  local value, last = line:match("^(%d+) (%d+)$")
  if not last then print("FAIL bad counter file: " .. line) os.exit(1) end
  -- the token exactly, as uint64_t: f:read("*n") would round it to a double above 2^53
  if not (lock:fencing_token() > dlock.token(last)) then
    print("FAIL fencing: " .. lock:fencing_token_string() .. " <= " .. last) os.exit(1)
  end
  f = assert(io.open(path .. ".tmp", "w"))
  f:write(tonumber(value) + 1, " ", lock:fencing_token_string())
  f:close()
  assert(os.rename(path .. ".tmp", path))
  assert(lock:release())
end
client:close()
print("DONE")
