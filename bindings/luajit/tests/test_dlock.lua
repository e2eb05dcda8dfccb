-- Tests for the LuaJIT binding against a real redis-server (run through bindings/test.sh luajit,
-- which sets REDIS_PORT and DLOCK_LIBRARY). Ends with "luajit: N passed, N failed".
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path

local ffi = require("ffi")
local dlock = require("dlock")

ffi.cdef [[ int usleep(unsigned int usec); int getpid(void); ]]

local PORT = assert(os.getenv("REDIS_PORT"), "REDIS_PORT is not set (run bindings/test.sh luajit)")
local URL = "redis://127.0.0.1:" .. PORT

local function sleep(s) ffi.C.usleep(math.floor(s * 1e6)) end
local function now()
  local f = io.open("/proc/uptime") local t = f:read("*n") f:close() return t
end
local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  return (out:gsub("%s+$", ""))
end
local function shq(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function cli(...)
  local args = {}
  for i, a in ipairs({ ... }) do args[i] = shq(a) end
  return sh("redis-cli -p " .. PORT .. " " .. table.concat(args, " "))
end
local seq = 0
local function unique(prefix)
  seq = seq + 1
  return string.format("%s-%d-%d-%d", prefix or "t", ffi.C.getpid(), os.time(), seq)
end
local function key(name) return "dlock:{" .. name .. "}" end
-- Starts a LuaJIT process that runs body (Lua source) with ffi, dlock, name and c (a client of
-- URL) in scope, then closes c. Returns its popen handle: :read("*a") gives its output.
-- timeout bounds it, so that a test failing half-way leaves no process waiting for a lock.
local function spawn(name, body)
  local script = string.format([[
    package.path = %q .. "/../?.lua;" .. package.path
    local ffi = require("ffi")
    local dlock = require("dlock")
    local name = %q
    local c = assert(dlock.open(%q))
    %s
    c:close()]], here, name, URL, body)
  return assert(io.popen("timeout 60 luajit -e " .. shq(script) .. " 2>&1"))
end
local function wait_for(pred, timeout)
  local deadline = now() + (timeout or 5)
  while now() < deadline do
    if pred() then return true end
    sleep(0.01)
  end
  return pred()
end
local function rss_kib()
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmRSS:%s+(%d+)")
    if v then return tonumber(v) end
  end
end
-- Calls fn, a one-line function(), and checks it raises an error matching pattern that points
-- at fn's line in this file ("test_dlock.lua:123: bad argument ..."), not into dlock.lua.
local function raises(fn, pattern)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error")
  err = tostring(err)
  if pattern then assert(err:find(pattern), "error '" .. err .. "' lacks " .. pattern) end
  local info = debug.getinfo(fn, "S")
  local where = info.short_src .. ":" .. info.linedefined .. ": "
  assert(err:sub(1, #where) == where, "error '" .. err .. "' does not start with " .. where)
  assert(not err:find("/dlock.lua:", 1, true), err)
  return err
end

local tests, order = {}, {}
local function test(name, fn) tests[name] = fn order[#order + 1] = name end

-- ----------------------------------------------------------------------------------------------

test("acquire, extend, release", function()
  local client = assert(dlock.open(URL))
  local name = unique()
  local lock, err = client:acquire(name, { lease_ms = 3000 })
  assert(lock, err)
  assert(ffi.istype("uint64_t", lock:fencing_token()))
  assert(lock:fencing_token() > 0)
  assert(lock:fencing_token_string():match("^%d+$"))
  assert(lock:valid())
  assert(lock:attempts() == 1)
  local left = lock:remaining_ms()
  assert(left > 0 and left <= 3000, left)
  assert(cli("EXISTS", key(name)) == "1")
  assert(lock:extend(20000))
  assert(tonumber(cli("PTTL", key(name))) > 10000)
  assert(lock:extend(0))
  assert(lock:remaining_ms() == math.huge)
  assert(cli("PTTL", key(name)) == "-1")
  assert(lock:release() == true)
  assert(cli("EXISTS", key(name)) == "0")
  assert(not lock:valid() and lock:remaining_ms() == 0 and lock:released())
  local ok, msg, code = lock:release()
  assert(ok == nil and code == "NOT_HELD" and msg:find("released"), msg)
  ok, msg, code = lock:extend(1000)
  assert(ok == nil and code == "NOT_HELD")
  assert(tostring(lock):find("released"))
  client:close()
  assert(client:closed())
  assert(client:close())  -- idempotent
end)

test("not acquired, waiting, tokens strictly rising", function()
  local a = assert(dlock.open(URL))
  local b = assert(dlock.open(URL))
  local name = unique()
  local last = 0ULL
  for i = 1, 30 do
    local lock = assert(a:acquire(name, { lease_ms = (i % 5 == 0) and 0 or 5000 }))
    assert(lock:fencing_token() > last)
    last = lock:fencing_token()
    assert(lock:release())
  end
  local held = assert(a:acquire(name, { lease_ms = 200, heartbeat_ms = 0 }))
  local lock, msg, code = b:acquire(name, { wait_ms = 0 })  -- one try
  assert(lock == nil and code == "NOT_ACQUIRED" and msg:find(name, 1, true), msg)
  -- its lease runs out (no heartbeats): a waiter gets it, with a higher token
  lock = assert(b:acquire(name, { wait_ms = 5000 }))
  assert(lock:fencing_token() > held:fencing_token())
  assert(lock:attempts() > 1)
  local ok, _, c2 = held:release()
  assert(ok == nil and c2 == "NOT_HELD")
  assert(lock:release())
  a:close() b:close()
end)

test("waits by default: acquire and run wait for the holder's release", function()
  local client = assert(dlock.open(URL))
  local name = unique("default")
  -- Renewed by heartbeats: only the release can end the waiters' wait.
  local holder = assert(client:acquire(name, { lease_ms = 10000 }))
  local function in_line(n)
    return function() return cli("ZCARD", key(name) .. ":line") == tostring(n) end
  end
  -- acquire with no opts (in another process) ...
  local first = spawn(name, [[
      local l, err, code = c:acquire(name)
      print(l and l:fencing_token_string() or ("FAIL " .. tostring(code) .. " " .. tostring(err)))
      if l then assert(l:release()) end]])
  assert(wait_for(in_line(1), 20), "acquire(name) did not wait in line")
  -- ... and run with opts that give no wait_ms: both wait in line behind the holder
  local second = spawn(name, [[
      local ok, token, code = c:run(name, { owner = "second" }, function(l)
        return l:fencing_token_string()
      end)
      print(ok and token or ("FAIL " .. tostring(code) .. " " .. tostring(token)))]])
  assert(wait_for(in_line(2), 20), "run(name, { owner = ... }) did not wait in line")
  local info = assert(client:inspect(name))
  assert(#info.holders == 1 and info.holders[1].fencing_token == holder:fencing_token())
  assert(holder:release())
  local out1, out2 = first:read("*a"), second:read("*a")
  first:close() second:close()
  assert(out1:match("^%d+\n$"), out1)
  assert(out2:match("^%d+\n$"), out2)
  local t1, t2 = dlock.token(out1:match("%d+")), dlock.token(out2:match("%d+"))
  assert(t1 > holder:fencing_token(), out1)
  assert(t2 > t1, out1 .. " then " .. out2)  -- handed over in arrival order (fair)
  assert(#assert(client:inspect(name)).holders == 0)
  client:close()
end)

test("two OS processes contend (tokens near 2^53)", function()
  local name = unique("procs")
  -- tokens just under the greatest dlock issues (2^53 - 1): the workers pass them on exactly
  cli("SET", key(name) .. ":fence", "9007199254740000")
  local path = os.tmpname()
  local f = assert(io.open(path, "w")) f:write("0 0") f:close()
  local n = 150
  local cmd = string.format("luajit %s/worker.lua %s %s %s %d", here, URL, name, path, n)
  local p1 = assert(io.popen(cmd))
  local p2 = assert(io.popen(cmd))
  local out1, out2 = p1:read("*a"), p2:read("*a")
  p1:close() p2:close()
  assert(out1:find("DONE"), "worker 1: " .. out1)
  assert(out2:find("DONE"), "worker 2: " .. out2)
  f = assert(io.open(path)) local value = f:read("*n") f:close()
  os.remove(path)
  assert(value == 2 * n, "counter is " .. tostring(value))
  assert(cli("EXISTS", key(name)) == "0")
end)

test("lost notification reaches user code", function()
  local client = assert(dlock.open(URL))
  local name = unique("lost")
  local got = {}
  -- A lease of 2 s (renewed every 150 ms): still valid 0.4 s later on however busy a machine.
  local lock = assert(client:acquire(name, { lease_ms = 2000, heartbeat_ms = 150,
    on_lost = function(l) got[#got + 1] = l end }))
  sleep(0.4)
  assert(client:poll() == 0 and lock:valid())
  cli("DEL", key(name))  -- behind the holder's back
  assert(wait_for(function() client:poll() return #got > 0 end, 5), "on_lost never ran")
  assert(got[1] == lock)
  assert(not lock:valid() and lock:remaining_ms() == 0)
  assert(tostring(lock):find("lost"))
  local ok, msg, code = lock:extend(1000)
  assert(ok == nil and code == "NOT_HELD" and msg:find("lost"), msg)
  ok, msg, code = lock:release()
  assert(ok == nil and code == "NOT_HELD")
  sleep(0.2)
  client:poll()
  assert(#got == 1, "on_lost ran more than once")
  -- a callback that errors does not break anything; released locks are never reported
  local other = assert(client:acquire(unique("lost"), { lease_ms = 600, heartbeat_ms = 150,
    on_lost = function() error("buggy callback") end }))
  local fine = assert(client:acquire(unique("lost"), { on_lost = function() got[#got + 1] = "no" end }))
  assert(fine:release())
  cli("DEL", key(other.name))
  assert(wait_for(function() return client:poll() == 1 end, 5))
  assert(#got == 1)
  other:release()
  client:close()
end)

test("max_hold_ms: renewed past its first lease, then lost with cause max_hold", function()
  local client = assert(dlock.open(URL))
  local name = unique("maxhold")
  local got = {}
  -- A lease of 800 ms renewed every 200 ms, kept at most 1200 ms: valid at ~1 s (past the first
  -- lease), lost by ~2 s (max_hold_ms + lease_ms).
  local start = now()
  local lock = assert(client:acquire(name, { lease_ms = 800, heartbeat_ms = 200, max_hold_ms = 1200,
    on_lost = function(l) got[#got + 1] = l:lost_cause() end }))
  sleep(1.0)
  assert(client:poll() == 0 and lock:valid(), "not renewed past its first lease")
  assert(lock:lost_cause() == nil)
  assert(cli("EXISTS", key(name)) == "1")
  assert(wait_for(function() client:poll() return #got > 0 end, 10), "on_lost never ran")
  assert(now() - start >= 1.19, "lost after " .. (now() - start) .. " s")
  assert(got[1]:find("^max_hold: maximum hold reached %(max_hold_ms 1200%)"), got[1])
  assert(not lock:valid())
  assert(lock:lost_cause():find("^max_hold: "), lock:lost_cause())
  -- The binding may see the deadline pass (and call on_lost) a moment before the library's
  -- heartbeats count the loss: wait for the count.
  assert(wait_for(function()
    return assert(client:metrics_text()):find('dlock_losses_total{cause="max_hold"} 1\n', 1, true)
  end, 5), client:metrics_text())
  local ok, msg, code = lock:release()
  assert(ok == nil and code == "NOT_HELD", msg)
  -- a max hold needs a lease: EINVAL naming it, and nothing left behind (acquire and campaign)
  for _, call in ipairs({ "acquire", "campaign" }) do
    local l
    l, msg, code = client[call](client, name, { lease_ms = 0, max_hold_ms = 1000 })
    assert(l == nil and code == "EINVAL" and msg:find("max_hold_ms 1000", 1, true), call .. ": " .. tostring(msg))
  end
  ok, msg, code = client:run(name, { lease_ms = 0, max_hold_ms = 1000 }, function() error("ran") end)
  assert(ok == nil and code == "EINVAL" and msg:find("max_hold_ms", 1, true), msg)
  -- above ten years: the library's EINVAL; wrong types and negatives raise; 0 is none
  local l
  l, msg, code = client:acquire(name, { max_hold_ms = 10 * 366 * 24 * 3600 * 1000 + 1 })
  assert(l == nil and code == "EINVAL" and msg:find("max_hold_ms %d+ is too long"), msg)
  raises(function() client:acquire(name, { max_hold_ms = "5" }) end, "max_hold_ms must be a number")
  raises(function() client:acquire(name, { max_hold_ms = -1 }) end, "max_hold_ms %-1 is out of range")
  raises(function() client:acquire(name, { max_hold_ms = 1.5 }) end, "max_hold_ms must be an integer")
  assert(cli("EXISTS", key(name)) == "0")
  local plain = assert(client:acquire(name, { lease_ms = 5000, max_hold_ms = 0 }))
  assert(plain:valid() and plain:release())
  plain = assert(client:acquire(name, { lease_ms = 5000, max_hold_ms = ffi.new("uint64_t", 60000) }))
  assert(plain:valid() and plain:release())
  client:close()
end)

test("reentrant: the same context re-enters, and only the last release frees the name", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local name = unique("reentrant")
  local outer = assert(client:acquire(name, { lease_ms = 5000, reentrant = "request-42" }))
  local inner = assert(client:acquire(name, { wait_ms = 0, reentrant = "request-42" }))
  assert(inner ~= outer and inner:fencing_token() == outer:fencing_token())
  local ran = assert(client:run(name, { wait_ms = 0, reentrant = "request-42" }, function(lock)
    return lock:fencing_token() == outer:fencing_token()
  end))
  assert(ran == true)
  for _, ctx in ipairs({ "request-43", false }) do  -- another context, or none, contends
    local l, msg, code = client:acquire(name, { wait_ms = 0, reentrant = ctx or nil })
    assert(l == nil and code == "NOT_ACQUIRED", tostring(msg))
  end
  assert(inner:release())
  local l, msg, code = other:acquire(name, { wait_ms = 0 })
  assert(l == nil and code == "NOT_ACQUIRED", tostring(msg))
  assert(outer:valid() and outer:release())
  assert(assert(other:acquire(name, { wait_ms = 0 })):release())
  -- "" and contexts over 256 bytes are the library's "EINVAL", naming the context
  l, msg, code = client:acquire(name, { reentrant = "" })
  assert(l == nil and code == "EINVAL" and msg:find("reentrant context is empty", 1, true), tostring(msg))
  l, msg, code = client:acquire(name, { reentrant = string.rep("c", 257) })
  assert(l == nil and code == "EINVAL" and msg:find("reentrant context is longer", 1, true), tostring(msg))
  assert(not pcall(client.acquire, client, name, { reentrant = 42 }))
  client:close()
  other:close()
end)

test("min_hold_ms: an early release leaves the name closed until the min hold has passed", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local caps = assert(client:capabilities())
  assert(caps.min_hold == true and caps.lock_delay == true and caps.observe_push == true)
  local name = unique("minhold")
  local start = now()
  local lock = assert(client:acquire(name, { lease_ms = 5000, min_hold_ms = 1000, owner = "cron" }))
  local token = lock:fencing_token()
  assert(lock:release())  -- at once: it leaves a marker with no owner
  assert(now() - start < 0.9, "release took until " .. (now() - start) .. " s")
  local l, msg, code = other:acquire(name, { wait_ms = 0 })
  assert(l == nil and code == "NOT_ACQUIRED" and msg:find("min_hold", 1, true), tostring(msg))
  local info = assert(other:inspect(name))
  assert(#info.holders == 0, #info.holders)
  assert(info.closed_ms > 0 and info.closed_ms <= 1000, info.closed_ms)
  assert(info.closed_by == "min_hold", info.closed_by)
  -- once the min hold has passed since the acquire: taken, with a greater token
  local after = assert(other:acquire(name, { wait_ms = 5000 }))
  assert(now() - start >= 0.9, "acquired after " .. (now() - start) .. " s")
  assert(after:fencing_token() > token)
  assert(after:release())
  -- 0 is none: a release frees the name at once
  local plain = unique("minhold")
  assert(assert(client:acquire(plain, { lease_ms = 5000, min_hold_ms = 0 })):release())
  assert(assert(other:acquire(plain, { wait_ms = 0, min_hold_ms = ffi.new("uint64_t", 0) })):release())
  client:close()
  other:close()
end)

test("lock_delay_ms: a lease that runs out leaves the name closed for the delay", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local name = unique("lockdelay")
  local start = now()
  -- A lease of 500 ms, no heartbeats, never released: it ends uncleanly, then 1 s of delay.
  local lock = assert(client:acquire(name, { lease_ms = 500, heartbeat_ms = 0, lock_delay_ms = 1000 }))
  local token = lock:fencing_token()
  sleep(math.max(0, start + 0.7 - now()))
  local l, msg, code = other:acquire(name, { wait_ms = 0 })
  assert(l == nil and code == "NOT_ACQUIRED" and msg:find("lock_delay", 1, true), tostring(msg))
  local info = assert(other:inspect(name))
  assert(#info.holders == 0, #info.holders)
  assert(info.closed_ms > 0 and info.closed_ms <= 1000, info.closed_ms)
  assert(info.closed_by == "lock_delay", info.closed_by)
  local after = assert(other:acquire(name, { wait_ms = 5000 }))
  assert(now() - start >= 1.4, "acquired after " .. (now() - start) .. " s")
  assert(after:fencing_token() > token)
  assert(after:release())
  local ok
  ok, msg, code = lock:release()
  assert(ok == nil and code == "NOT_HELD", msg)
  -- a release is a clean end: no delay
  local clean = unique("lockdelay")
  assert(assert(client:acquire(clean, { lease_ms = 5000, lock_delay_ms = 10000 })):release())
  assert(assert(other:acquire(clean, { wait_ms = 0 })):release())
  client:close()
  other:close()
end)

test("min_hold_ms and lock_delay_ms: bad values are refused naming the option", function()
  local client = assert(dlock.open(URL))
  assert(dlock.MAX_LOCK_DELAY_MS == 60000)
  local name = unique("jobrules")
  -- above the cap: the library's EINVAL (acquire and campaign); at the cap is fine
  for _, call in ipairs({ "acquire", "campaign" }) do
    local l, msg, code = client[call](client, name, { lock_delay_ms = 60001 })
    assert(l == nil and code == "EINVAL" and msg:find("lock_delay_ms 60001", 1, true), call .. ": " .. tostring(msg))
  end
  local l, msg, code = client:acquire(name, { min_hold_ms = 10 * 366 * 24 * 3600 * 1000 + 1 })
  assert(l == nil and code == "EINVAL" and msg:find("min_hold_ms %d+ is too long"), msg)
  -- a min hold above the max hold: refused at acquire, naming both
  for _, call in ipairs({ "acquire", "campaign" }) do
    l, msg, code = client[call](client, name, { lease_ms = 1000, max_hold_ms = 1000, min_hold_ms = 2000 })
    assert(l == nil and code == "EINVAL" and msg:find("min_hold_ms 2000", 1, true)
      and msg:find("max_hold_ms 1000", 1, true), call .. ": " .. tostring(msg))
  end
  local ok
  ok, msg, code = client:run(name, { lease_ms = 1000, max_hold_ms = 1000, min_hold_ms = 2000 },
    function() error("ran") end)
  assert(ok == nil and code == "EINVAL" and msg:find("min_hold_ms", 1, true), msg)
  -- wrong types and negatives raise, naming the option
  for _, field in ipairs({ "min_hold_ms", "lock_delay_ms" }) do
    raises(function() client:acquire(name, { [field] = "5" }) end, field .. " must be a number")
    raises(function() client:acquire(name, { [field] = -1 }) end, field .. " %-1 is out of range")
    raises(function() client:acquire(name, { [field] = 1.5 }) end, field .. " must be an integer")
  end
  assert(cli("EXISTS", key(name)) == "0")
  assert(assert(client:acquire(name, { lease_ms = 5000, lock_delay_ms = 60000 })):release())
  client:close()
end)

test("break_lock: the holder is lost with cause broken; the name stays closed, or is free with now", function()
  local client = assert(dlock.open(URL))
  local operator = assert(dlock.open(URL))
  assert(assert(client:capabilities())["break"] == true)
  assert(dlock.MAX_REASON_BYTES == 1024)
  local name = unique("break")
  local got = {}
  -- A lease of 1 s renewed every 250 ms: the holder hears of the break within ~250 ms.
  local lock = assert(client:acquire(name, { lease_ms = 1000, heartbeat_ms = 250, owner = "holder-7",
    on_lost = function(l) got[#got + 1] = l:lost_cause() end }))
  local token = lock:fencing_token()
  local info = assert(operator:break_lock(name, "disk full on db-3"))
  assert(info.kind == "exclusive" and #info.holders == 1, #info.holders)
  local h = info.holders[1]
  assert(h.owner == "holder-7", tostring(h.owner))
  assert(h.fencing_token == token, tostring(h.fencing_token))
  assert(h.remaining_ms > 0 and h.remaining_ms <= 1000, h.remaining_ms)
  assert(info.closed_ms > 0 and info.closed_ms <= 1000, info.closed_ms)
  assert(info.closed_by == "broken", info.closed_by)
  -- closed: no holder, closed_ms > 0, and nobody takes it meanwhile
  local seen = assert(operator:inspect(name))
  assert(#seen.holders == 0 and seen.closed_ms > 0 and seen.closed_by == "broken", seen.closed_ms)
  local l, _, code = operator:acquire(name, { wait_ms = 0 })
  assert(l == nil and code == "NOT_ACQUIRED", code)
  -- the holder hears it at its next renewal
  assert(wait_for(function() client:poll() return #got > 0 end, 5), "on_lost never ran")
  assert(got[1]:find("^broken"), got[1])
  assert(got[1]:find("disk full on db-3", 1, true), got[1])
  assert(not lock:valid())
  assert(lock:lost_cause() == got[1])
  assert(wait_for(function()
    return assert(client:metrics_text()):find('dlock_losses_total{cause="broken"} 1\n', 1, true)
  end, 5), client:metrics_text())
  local ok, msg
  ok, msg, code = lock:release()
  assert(ok == nil and code == "NOT_HELD", msg)
  -- once the broken lease would have ended, the name opens, with a greater token
  local after = assert(operator:acquire(name, { wait_ms = 5000 }))
  assert(after:fencing_token() > token)
  seen = assert(operator:inspect(name))
  assert(seen.closed_ms == 0 and seen.closed_by == "", seen.closed_ms)
  assert(after:release())

  -- now = true: free at once, taken with a greater token
  got = {}
  name = unique("break")
  lock = assert(client:acquire(name, { lease_ms = 1000, heartbeat_ms = 250, owner = "holder-7",
    on_lost = function(lk) got[#got + 1] = lk:lost_cause() end }))
  token = lock:fencing_token()
  info = assert(operator:break_lock(name, "failover", true))
  assert(#info.holders == 1 and info.holders[1].fencing_token == token and info.holders[1].owner == "holder-7")
  assert(info.closed_ms == 0 and info.closed_by == "", info.closed_ms)
  local taken = assert(operator:acquire(name, { wait_ms = 0 }))
  assert(taken:fencing_token() > token)
  assert(wait_for(function() client:poll() return #got > 0 end, 5), "on_lost never ran")
  assert(got[1]:find("^broken") and got[1]:find("failover", 1, true), got[1])
  ok, msg, code = lock:release()
  assert(ok == nil and code == "NOT_HELD", msg)
  assert(assert(operator:inspect(name)).holders[1].fencing_token == taken:fencing_token())
  assert(taken:release())

  -- a free name; bad input
  info = assert(operator:break_lock(unique("break")))
  assert(#info.holders == 0 and info.closed_ms == 0 and info.closed_by == "" and info.kind == "exclusive")
  assert(#assert(operator:break_lock(unique("break"), nil, true)).holders == 0)
  assert(operator:break_lock(name, string.rep("r", dlock.MAX_REASON_BYTES)))  -- at most is fine
  local r
  r, msg, code = operator:break_lock(name, string.rep("r", dlock.MAX_REASON_BYTES + 1))
  assert(r == nil and code == "EINVAL" and msg:find("reason"), tostring(msg))
  for _, bad in ipairs({ "", string.rep("x", dlock.MAX_NAME_BYTES + 1) }) do
    r, msg, code = operator:break_lock(bad)
    assert(r == nil and code == "EINVAL" and #msg > 0, tostring(msg))
  end
  raises(function() operator:break_lock(5) end, "bad argument #1 to 'break_lock'")
  raises(function() operator:break_lock(name, 5) end, "bad argument #2 to 'break_lock'")
  raises(function() operator:break_lock(name, "a\0b") end, "bad argument #2 to 'break_lock'")
  raises(function() operator:break_lock(name, nil, 1) end, "bad argument #3 to 'break_lock'")
  operator:close()
  r, msg, code = operator:break_lock(name)
  assert(r == nil and code == "EINVAL" and msg:find("closed"), msg)
  client:close()
end)

test("request_release: the holder hears the reason and may release; a free name is false", function()
  local client = assert(dlock.open(URL))
  local asker = assert(dlock.open(URL))
  assert(assert(client:capabilities()).release_request == true)
  local name = unique("ask")
  local got = {}
  local lock = assert(client:acquire(name, { on_release_requested = function(l, reason)
    got[#got + 1] = { l, reason }
    assert(l:release())
  end }))
  -- The holder's subscription is live a round trip after its acquire: ask until it is heard
  -- (every 150 ms, delivered by dispatch), at most 5 s.
  local deadline = now() + 5
  while #got == 0 and now() < deadline do
    assert(asker:request_release(name, "deploy #42") == true)
    client:dispatch(150)
  end
  assert(#got == 1, "never heard")
  assert(got[1][1] == lock and got[1][2] == "deploy #42", tostring(got[1][2]))
  assert(lock:released())
  assert(#assert(asker:inspect(name)).holders == 0)
  local r, msg, code = asker:request_release(name, "again")  -- free now: nobody to ask
  assert(r == false and code == "NOT_HELD" and #msg > 0, tostring(msg))
  assert(asker:request_release(unique("ask")) == false)
  r, msg, code = asker:request_release(name, string.rep("r", dlock.MAX_REASON_BYTES + 1))
  assert(r == nil and code == "EINVAL" and msg:find("reason"), tostring(msg))
  raises(function() asker:request_release(5) end, "bad argument #1 to 'request_release'")
  raises(function() asker:request_release(name, 5) end, "bad argument #2 to 'request_release'")
  raises(function() client:acquire(name, { on_release_requested = 5 }) end, "on_release_requested must be")
  asker:close()
  r, msg, code = asker:request_release(name)
  assert(r == nil and code == "EINVAL" and msg:find("closed"), msg)
  client:close()
end)

test("every error kind is mapped", function()
  local expect = { [1] = "NOT_ACQUIRED", [2] = "NOT_HELD", [3] = "EINVAL", [4] = "EIO",
    [5] = "EBACKEND", [6] = "EAUTH", [7] = "ECANCELLED", [8] = "ENOMEM", [9] = "EINTERNAL" }
  for status, code in pairs(expect) do
    assert(dlock.code(status) == code)
    assert(dlock.status[code] == status)
    local ok, msg, c = dlock._fail(status)
    assert(ok == nil and c == code and type(msg) == "string")
  end
  assert(dlock.code(77) == "UNKNOWN")
  assert(dlock.status.OK == 0 and dlock.status.UNKNOWN == nil)
  -- a status a newer library may add: nil, a message, the library's name for it
  local ok, msg, c = dlock._fail(77)
  assert(ok == nil and type(msg) == "string" and c == "UNKNOWN")
  -- EINVAL, EIO, EAUTH from open; EBACKEND, NOT_ACQUIRED, NOT_HELD from real calls
  local c, msg, code = dlock.open("bogus://x")
  assert(c == nil and code == "EINVAL" and msg:find("bogus"), msg)
  c, msg, code = dlock.open(URL .. "?nope=1")
  assert(c == nil and code == "EINVAL" and msg:find("nope"), msg)
  c, msg, code = dlock.open("redis://127.0.0.1:1?connect_timeout_ms=500")
  assert(c == nil and code == "EIO" and msg:find("127.0.0.1:1"), msg)
  local user = unique("user")
  cli("ACL", "SETUSER", user, "on", ">right", "~*", "&*", "+@all")
  c, msg, code = dlock.open("redis://" .. user .. ":wrong@127.0.0.1:" .. PORT)
  assert(c == nil and code == "EAUTH" and not msg:find("wrong"), msg)
  c = assert(dlock.open("redis://" .. user .. ":right@127.0.0.1:" .. PORT))
  c:close()
  cli("ACL", "DELUSER", user)
  local client = assert(dlock.open(URL))
  local name = unique()
  cli("SET", key(name) .. ":fence", "not-a-number")
  local lock
  lock, msg, code = client:acquire(name)
  assert(lock == nil and code == "EBACKEND", msg)
  assert(cli("EXISTS", key(name)) == "0")
  client:close()
  lock, msg, code = client:acquire(name)
  assert(lock == nil and code == "EINVAL" and msg:find("closed"))
end)

test("bad input: Lua errors for wrong types, nil+EINVAL for refused values", function()
  local client = assert(dlock.open(URL))
  for _, bad in ipairs({ 123, true, {}, function() end }) do
    raises(function() client:acquire(bad) end, "bad argument #1 to 'acquire'")
  end
  raises(function() client:acquire() end, "string expected, got nil")
  raises(function() client.acquire("x") end, "client:acquire")
  raises(function() client:acquire("a\0b") end, "NUL")
  raises(function() dlock.open(42) end, "bad argument #1 to 'open'")
  raises(function() dlock.open() end, "bad argument")
  raises(function() client:acquire("x", "lease=5") end, "table expected")
  raises(function() client:acquire("x", { lease_ms = "10" }) end, "lease_ms must be a number")
  raises(function() client:acquire("x", { lease_ms = 1.5 }) end, "integer")
  raises(function() client:acquire("x", { lease_ms = -1 }) end, "out of range")
  raises(function() client:acquire("x", { lease_ms = 0 / 0 }) end, "integer")
  raises(function() client:acquire("x", { wait_ms = -2 }) end, "out of range")
  raises(function() client:acquire("x", { retry_ms = 5 }) end, "retry_ms")
  raises(function() client:acquire("x", { owner = 5 }) end, "owner")
  raises(function() client:acquire("x", { on_lost = 5 }) end, "on_lost")
  raises(function() client:acquire("x", { leaseMs = 5 }) end, "unknown option 'leaseMs'")
  local cases = {
    { string.rep("x", 1025) }, { string.rep("x", 1000000) }, { string.rep("é", 513) }, { "" },
    { unique(), { lease_ms = 20 * 365 * 86400 * 1000 } },
    { unique(), { lease_ms = 1000, heartbeat_ms = 1000 } },
    { unique(), { retry_ms = { 0, 10 } } }, { unique(), { retry_ms = { 10, 5 } } },
    { unique(), { owner = string.rep("o", 257) } },
  }
  for i, case in ipairs(cases) do
    local lock, msg, code = client:acquire(case[1], case[2])
    assert(lock == nil and code == "EINVAL" and #msg > 0, "case " .. i .. ": " .. tostring(msg))
  end
  assert(cli("KEYS", "dlock:{t-*}") == "", "bad input left a lock behind")
  local ok = assert(client:acquire(string.rep("x", 1024)))
  assert(ok:release())
  ok = assert(client:acquire("\255\254 raw bytes"))
  assert(ok.name == "\255\254 raw bytes")
  assert(ok:release())
  local lock = assert(client:acquire(unique()))
  raises(function() lock:extend("1000") end, "bad argument #1 to 'extend'")
  raises(function() lock:extend(-5) end, "out of range")
  local r, msg, code = lock:extend(5)  -- too short for the library
  assert(r == nil and code == "EINVAL", msg)
  assert(lock:release())
  client:close()
end)

test("argument errors name the caller's file and line", function()
  -- raises() checks each message starts with "<this file>:<line of the call>: "
  local client = assert(dlock.open(URL))
  local lock = assert(client:acquire(unique()))
  raises(function() dlock.open(42) end, "^[^ ]+ bad argument #1 to 'open' %(string expected, got number%)$")
  raises(function() dlock.open("redis://x\0y") end, "NUL")
  raises(function() dlock.code("x") end, "bad argument #1 to 'code'")
  raises(function() dlock.token("12a") end, "bad argument #1 to 'token'")
  raises(function() dlock.token("18446744073709551616") end, "above 18446744073709551615")
  raises(function() dlock.token(2^53 + 2) end, "9007199254740994 is not")
  raises(function() dlock.token(-1LL) end, "-1 is negative")
  raises(function() dlock.token(nil) end, "string expected, got nil")
  raises(function() client.acquire("x") end, "client:acquire")
  raises(function() client:acquire(1) end, "bad argument #1 to 'acquire' %(string expected")
  raises(function() client:acquire("a\0b") end, "bad argument #1 to 'acquire'.*NUL")
  raises(function() client:acquire("x", 1) end, "bad argument #2 to 'acquire' %(table expected")
  raises(function() client:acquire("x", { lease_ms = {} }) end, "bad argument #2 to 'acquire' %(lease_ms")
  raises(function() client:acquire("x", { wait_ms = 0.5 }) end, "bad argument #2 to 'acquire' %(wait_ms")
  raises(function() client:acquire("x", { heartbeat_ms = -1 }) end, "heartbeat_ms %-1 is out of range")
  raises(function() client:acquire("x", { retry_ms = 1 }) end, "bad argument #2 to 'acquire' %(retry_ms")
  raises(function() client:acquire("x", { retry_ms = { 1, "2" } }) end, "retry_ms%[2%] must be a number")
  raises(function() client:acquire("x", { owner = "a\0" }) end, "bad argument #2 to 'acquire' %(owner")
  raises(function() client:acquire("x", { on_lost = true }) end, "bad argument #2 to 'acquire' %(on_lost")
  raises(function() client:acquire("x", { lase_ms = 1 }) end, "bad argument #2 to 'acquire' %(unknown option")
  raises(function() lock.extend(1000) end, "lock:extend")
  raises(function() lock:extend() end, "bad argument #1 to 'extend' %(lease_ms must be a number, got nil%)")
  raises(function() lock:extend(-5LL) end, "bad argument #1 to 'extend' %(lease_ms %-5 is out of range%)")
  -- from a nested function of the caller too: the innermost frame outside dlock.lua
  local function helper() client:acquire("x", { lease_ms = "1" }) end
  local ok, err = pcall(function() helper() end)
  assert(not ok and err:find(":" .. debug.getinfo(helper, "S").linedefined .. ": bad argument #2", 1, true), err)
  assert(lock:release())
  client:close()
end)

test("tokens near 2^53 stay exact: printing, parsing, on_lost, the limit, messages", function()
  local client = assert(dlock.open(URL))
  local name = unique("big")
  cli("SET", key(name) .. ":fence", "9007199254740988")  -- the next token is 2^53 - 3
  local got
  local lock = assert(client:acquire(name, { lease_ms = 600, heartbeat_ms = 150,
    on_lost = function(l) got = l:fencing_token_string() end }))
  local token = lock:fencing_token()
  assert(ffi.istype("uint64_t", token))
  assert(token == 9007199254740989ULL, tostring(token))
  assert(lock:fencing_token_string() == "9007199254740989", lock:fencing_token_string())
  assert(cli("GET", key(name) .. ":fence") == "9007199254740989")
  assert(tostring(token) == "9007199254740989ULL")           -- what print(token) shows
  assert(string.format("%d", token) == "9007199254740989")
  assert(tostring(lock) == string.format("dlock.lock(%q, token=9007199254740989, held)", name), tostring(lock))
  assert(dlock.token("9007199254740989") == token and dlock.token(lock:fencing_token_string()) == token)
  assert(dlock.token("9007199254740988") < token, "parsed below")
  assert(dlock.token(2^53) > token, "2^53 above")
  -- etcd's revisions may pass 2^53: parsing keeps every uint64 exact
  assert(dlock.token("9007199254740995") > dlock.token("9007199254740994"))
  assert(dlock.token("18446744073709551615") > dlock.token("9223372036854775807"))
  -- on_lost sees the exact token
  cli("DEL", key(name))
  assert(wait_for(function() client:poll() return got ~= nil end, 5), "on_lost never ran")
  assert(got == "9007199254740989", got)
  -- the next tokens are greater, up to 2^53 - 1, the greatest a Redis counter issues
  local again = assert(client:acquire(name))
  assert(again:fencing_token() > token and again:fencing_token_string() == "9007199254740990")
  assert(again:release())
  local top = assert(client:acquire(name))
  assert(top:fencing_token() == 9007199254740991ULL and top:fencing_token_string() == "9007199254740991")
  assert(top:release())
  -- past it the name is refused, with a message naming the limit, and nothing is written
  local none, err = client:acquire(name, { wait_ms = 0 })
  assert(none == nil and tostring(err):find("2^53 - 1 (9007199254740991)", 1, true), tostring(err))
  assert(cli("GET", key(name) .. ":fence") == "9007199254740991", cli("GET", key(name) .. ":fence"))
  -- numbers in messages print as integers, never as 9.007199254741e+15
  local ok
  ok, err = pcall(function() client:acquire(name, { lease_ms = 2^53 + 2 }) end)
  assert(not ok and err:find("lease_ms 9007199254740994 is out of range (0..9007199254740992)", 1, true), err)
  ok, err = pcall(function() client:acquire(name, { wait_ms = -2^60 }) end)
  assert(not ok and err:find("wait_ms -1152921504606846976 is out of range (-1..", 1, true), err)
  client:close()
end)

test("a relative DLOCK_LIBRARY is taken from the current directory", function()
  local env = os.getenv("DLOCK_LIBRARY")
  if env and env ~= "" then assert(env:sub(1, 1) == "/", "bindings/test.sh left DLOCK_LIBRARY relative: " .. env) end
  local dir, base = dlock.library_path:match("^(/.*)/([^/]+)$")
  if not dir then io.stderr:write("  (skipped: libdlock came from the loader's path)\n") return end
  local lua_dir = here:sub(1, 1) == "/" and here or (sh("pwd") .. "/" .. here)
  local code = "package.path = " .. string.format("%q", lua_dir .. "/../?.lua;") .. " .. package.path "
    .. "io.write(require('dlock').library_path)"
  local parent, last = dir:match("^(.*)/([^/]+)$")
  for _, case in ipairs({ { dir, base }, { dir, "./" .. base }, { parent == "" and "/" or parent, last .. "/" .. base } }) do
    local out = sh("cd " .. shq(case[1]) .. " && DLOCK_LIBRARY=" .. shq(case[2]) .. " luajit -e " .. shq(code) .. " 2>&1")
    assert(out == dir .. "/" .. base, "from " .. case[1] .. " with " .. case[2] .. ": " .. out)
  end
end)

test("nothing leaks over 10,000 cycles; forgotten handles are collected", function()
  local client = assert(dlock.open(URL))
  local name = unique("leak")
  local opts = { lease_ms = 5000, on_lost = function() end }
  for _ = 1, 1000 do assert(client:acquire(name, opts)):release() end
  collectgarbage() collectgarbage()
  local before = rss_kib()
  local t0 = now()
  for _ = 1, 10000 do
    local lock = client:acquire(name, opts)
    assert(lock:release())
  end
  collectgarbage() collectgarbage()
  local grown = rss_kib() - before
  io.stderr:write(string.format("  10000 acquire+release cycles in %.2f s, RSS grew %d KiB\n", now() - t0, grown))
  assert(grown < 4096, "RSS grew " .. grown .. " KiB")
  assert(next(client._watched) == nil)
  -- forgotten locks are released by the GC
  local names = {}
  for i = 1, 100 do
    names[i] = unique("gc")
    client:acquire(names[i], { lease_ms = 0 })
  end
  collectgarbage() collectgarbage()
  -- released late: the finalizer only starts the release
  for i = 1, 100 do assert(wait_for(function() return cli("EXISTS", key(names[i])) == "0" end), names[i]) end
  -- forgotten clients are closed at the next safe point (here client:poll()): their thread stops
  local tasks = sh("ls /proc/" .. ffi.C.getpid() .. "/task | wc -l")
  for _ = 1, 50 do
    local c = assert(dlock.open(URL))
    assert(c:acquire(unique("gc"), { lease_ms = 0 }))
  end
  collectgarbage() collectgarbage()
  client:poll()
  assert(sh("ls /proc/" .. ffi.C.getpid() .. "/task | wc -l") == tasks, "client threads left running")
  assert(wait_for(function() return cli("KEYS", "dlock:{gc-*}") == "" end))
  client:close()
end)

local function threads() return tonumber(sh("ls /proc/" .. ffi.C.getpid() .. "/task | wc -l")) end
-- Acquires name and forgets the lock (in a frame of its own: no stack slot keeps it).
local function forget(client, name) assert(client:acquire(name, { lease_ms = 0 })) end

test("finalizers do no I/O: forgotten locks and clients wait for nothing while Redis stalls", function()
  local url = URL .. "?timeout_ms=10000"
  local client = assert(dlock.open(url))
  local other = assert(dlock.open(url))
  local n1, n2 = unique("gcio"), unique("gcio")
  forget(client, n1)
  forget(other, n2)
  other = nil
  local before = threads()
  -- Redis holds back scripts (releases) for 2 s and still answers reads.
  assert(cli("CLIENT", "PAUSE", "2000", "WRITE") == "OK")
  local t0 = now()
  collectgarbage() collectgarbage()
  local took = now() - t0
  -- A blocking finalizer would have waited out the pause, and the keys would be gone.
  assert(cli("EXISTS", key(n1)) == "1" and cli("EXISTS", key(n2)) == "1",
    "a finalizer waited for its release")
  assert(took < 1, "the GC took " .. took .. " s")
  assert(threads() == before, "a finalizer closed a client")  -- not closed in the finalizer
  -- released late, once Redis answers
  assert(wait_for(function()
    return cli("EXISTS", key(n1)) == "0" and cli("EXISTS", key(n2)) == "0"
  end, 10), "the forgotten locks were never released")
  client:poll()  -- a safe point: closes the forgotten client
  assert(threads() == before - 1, "the forgotten client was not closed at the next poll")
  client:close()
end)

test("client:run releases whatever fn does, and raises fn's error again", function()
  local client = assert(dlock.open(URL))
  local name = unique("run")
  local ok, a, b, c = client:run(name, { lease_ms = 5000 }, function(lock)
    assert(lock:valid() and cli("EXISTS", key(name)) == "1")
    return 1, nil, "three"
  end)
  assert(ok == true and a == 1 and b == nil and c == "three")
  assert(cli("EXISTS", key(name)) == "0")
  -- fn raises: released, then the same error value raised again
  local boom, seen = { "boom" }, nil
  local okp, err = pcall(client.run, client, name, nil, function(lock) seen = lock error(boom) end)
  assert(not okp and err == boom, tostring(err))
  assert(seen:released() and cli("EXISTS", key(name)) == "0")
  okp, err = pcall(client.run, client, name, nil, function() error("plain", 0) end)
  assert(not okp and err == "plain", err)
  -- not acquired: fn is not called
  local holder = assert(client:acquire(name))
  local called = false
  local r, msg, code = client:run(name, { wait_ms = 0 }, function() called = true end)
  assert(r == nil and code == "NOT_ACQUIRED" and not called, msg)
  assert(holder:release())
  -- fn released it itself
  ok, a = client:run(name, nil, function(lock) assert(lock:release()) return "done" end)
  assert(ok == true and a == "done")
  -- lost while fn ran: the release says so
  r, msg, code = client:run(name, nil, function() cli("DEL", key(name)) return "late" end)
  assert(r == nil and code == "NOT_HELD", msg)
  raises(function() client:run(name, nil, 42) end, "bad argument #3 to 'run' %(function expected")
  raises(function() client:run(name, { bogus = 1 }, print) end, "bad argument #2 to 'run'")
  raises(function() client:run(42, nil, print) end, "bad argument #1 to 'run'")
  client:close()
end)

test("open options; outside nginx every call blocks", function()
  assert(dlock.in_nginx == false)
  local c = assert(dlock.open(URL, { blocking = true }))
  assert(c:close())
  c = assert(dlock.open(URL, {}))
  raises(function() dlock.open(URL, { bogus = true }) end, "unknown option 'bogus'")
  raises(function() dlock.open(URL, { blocking = 1 }) end, "blocking must be a boolean")
  raises(function() dlock.open(URL, 5) end, "bad argument #2 to 'open' %(table expected")
  c:close()
end)

test("inspect: a held lock seen from another client, then free", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local name = unique("inspect")
  local lock = assert(client:acquire(name, { lease_ms = 5000, owner = "worker-7" }))
  local info = assert(other:inspect(name))
  assert(info.kind == "exclusive" and #info.holders == 1, #info.holders)
  local h = info.holders[1]
  assert(h.owner == "worker-7", tostring(h.owner))
  assert(h.fencing_token == lock:fencing_token(), tostring(h.fencing_token))
  assert(h.remaining_ms > 0 and h.remaining_ms <= 5000, h.remaining_ms)
  assert(lock:release())
  info = assert(other:inspect(name))
  assert(info.kind == "exclusive" and #info.holders == 0)
  -- no owner, no expiry
  lock = assert(client:acquire(name, { lease_ms = 0 }))
  h = assert(other:inspect(name)).holders[1]
  assert(h.owner == nil and h.remaining_ms == nil and h.fencing_token == lock:fencing_token())
  assert(lock:release())
  -- refused names: nil, the library's message, EINVAL; wrong types: Lua errors
  for _, bad in ipairs({ "", string.rep("x", dlock.MAX_NAME_BYTES + 1) }) do
    local r, msg, code = other:inspect(bad)
    assert(r == nil and code == "EINVAL" and #msg > 0, tostring(msg))
  end
  raises(function() other:inspect(5) end, "bad argument #1 to 'inspect'")
  other:close()
  local r, msg, code = other:inspect(name)
  assert(r == nil and code == "EINVAL" and msg:find("closed"), msg)
  client:close()
end)

test("kind and permits reach the library; capabilities", function()
  local client = assert(dlock.open(URL))
  local caps = assert(client:capabilities())
  assert(caps.fencing_strict == true and caps.notifies == true)  -- what dlock.h says of Redis
  assert(caps.release_request == true)
  assert(type(caps.shared) == "boolean" and type(caps.permits) == "boolean")
  assert(assert(client:acquire(unique(), { kind = "exclusive", permits = 0 })):release())
  local name = unique("shared")
  if caps.shared then
    local a = assert(client:acquire(name, { kind = "shared" }))
    local b = assert(client:acquire(name, { kind = "shared" }))
    local info = assert(client:inspect(name))
    assert(info.kind == "shared" and #info.holders == 2)
    assert(a:release() and b:release())
  else  -- refused by the library, in its words, leaving nothing behind
    local lock, msg, code = client:acquire(name, { kind = "shared" })
    assert(lock == nil and code == "EINVAL" and msg:find("shared"), msg)
    assert(#assert(client:inspect(name)).holders == 0)
  end
  name = unique("permits")
  if caps.permits then
    local a = assert(client:acquire(name, { permits = 2 }))
    local b = assert(client:acquire(name, { permits = 2 }))
    local lock, _, code = client:acquire(name, { permits = 2, wait_ms = 0 })
    assert(lock == nil and code == "NOT_ACQUIRED")
    assert(a:release() and b:release())
  else
    local lock, msg, code = client:acquire(name, { permits = 2 })
    assert(lock == nil and code == "EINVAL" and msg:find("permits"), msg)
    assert(#assert(client:inspect(name)).holders == 0)
  end
  raises(function() client:acquire("x", { kind = "read" }) end, "kind must be")
  raises(function() client:acquire("x", { permits = -1 }) end, "permits must be")
  raises(function() client:acquire("x", { permits = "2" }) end, "permits must be")
  client:close()
  local r, _, code = client:capabilities()
  assert(r == nil and code == "EINVAL")
end)

test("shared: three holders at once, no exclusive one meanwhile", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local third = assert(dlock.open(URL))
  assert(assert(client:capabilities()).shared)
  local name = unique("shared")
  local r1 = assert(client:acquire(name, { shared = true, owner = "r1" }))
  local r2 = assert(client:acquire(name, { shared = true, owner = "r2" }))
  local r3 = assert(other:acquire(name, { kind = "shared", owner = "r3" }))
  -- a client holding the name shared may not take it exclusive (no upgrade): refused at once,
  -- though the default wait has no limit ...
  local lock, msg, code = client:acquire(name)
  assert(lock == nil and code == "EINVAL", msg)
  -- ... and another client is refused while the shared holds stand
  lock, msg, code = third:acquire(name, { wait_ms = 0 })
  assert(lock == nil and code == "NOT_ACQUIRED", msg)
  lock, msg, code = third:acquire(name, { shared = false, wait_ms = 200 })
  assert(lock == nil and code == "NOT_ACQUIRED", msg)
  local info = assert(third:inspect(name))
  assert(info.kind == "shared" and info.permits == 0 and #info.holders == 3, #info.holders)
  local want = { r1 = r1, r2 = r2, r3 = r3 }
  for _, h in ipairs(info.holders) do
    assert(want[h.owner] and h.fencing_token == want[h.owner]:fencing_token(), tostring(h.owner))
    want[h.owner] = nil
  end
  assert(next(want) == nil)
  assert(r1:fencing_token() ~= r2:fencing_token() and r2:fencing_token() ~= r3:fencing_token())
  assert(r1:release() and r2:release() and r3:release())
  info = assert(third:inspect(name))
  assert(info.kind == "exclusive" and #info.holders == 0 and info.permits == 0)
  assert(assert(third:acquire(name)):release())  -- free for an exclusive hold now
  client:close() other:close() third:close()
end)

test("shared: a waiting exclusive acquire (another process) keeps new shared holds out", function()
  local client = assert(dlock.open(URL))
  local third = assert(dlock.open(URL))
  local name = unique("shared")
  local reader = assert(client:acquire(name, { shared = true }))
  local writer = spawn(name, [[
    local l, err = c:acquire(name, { wait_ms = 5000 })
    print(l and l:fencing_token_string() or ("FAIL " .. tostring(err)))
    if l then l:release() end]])
  assert(wait_for(function()
    local l, _, code = third:acquire(name, { shared = true, wait_ms = 0 })
    if l then assert(l:release()) return false end  -- before the writer queued up
    return code == "NOT_ACQUIRED"
  end), "a new shared hold was let in before the waiting exclusive acquire")
  assert(reader:release())
  local out = writer:read("*a")
  writer:close()
  assert(out:match("^%d+"), out)
  assert(dlock.token(out:match("^%d+")) > reader:fencing_token(), out)
  client:close() third:close()
end)

test("fair = false waits outside the line: a fair waiter that came later is served first", function()
  local client = assert(dlock.open(URL))
  local name = unique("fair")
  local holder = assert(client:acquire(name, { lease_ms = 10000 }))
  -- Two waiting processes; retries 20-30 s apart, so only releases serve them within the test.
  local function waiter(fair)
    return spawn(name, [[
      ffi.cdef "int usleep(unsigned int usec);"
      local l, err = c:acquire(name, { wait_ms = 20000, retry_ms = { 20000, 30000 }, fair = ]]
      .. tostring(fair) .. [[ })
      if l then ffi.C.usleep(100000) end
      print(l and (l:fencing_token_string() .. " " .. l:attempts()) or ("FAIL " .. tostring(err)))
      if l then l:release() end]])
  end
  local unfair = waiter(false)
  -- Its first attempt refused, the unfair waiter listens for releases (and takes no place in
  -- line); only then does the fair one come.
  assert(wait_for(function()
    return tonumber(cli("PUBSUB", "NUMSUB", key(name) .. ":released"):match("(%d+)%s*$")) >= 1
  end, 20), "the unfair waiter never waited")
  local fair = waiter(true)
  -- Its first attempt refused, the fair waiter stands in line: the only one there.
  assert(wait_for(function() return cli("ZCARD", key(name) .. ":line") == "1" end, 20),
    "the fair waiter never took its place in line")
  assert(holder:release())  -- hands the lock to the fair waiter, the only one in line
  local fair_out, unfair_out = fair:read("*a"), unfair:read("*a")
  fair:close() unfair:close()
  local ft = assert(fair_out:match("^(%d+) %d+"), fair_out)
  local ut, ua = unfair_out:match("^(%d+) (%d+)")
  assert(ut, unfair_out)
  assert(dlock.token(ft) < dlock.token(ut), "fair " .. fair_out .. " unfair " .. unfair_out)
  assert(tonumber(ua) >= 2, unfair_out)  -- woken by a release, it asked again
  raises(function() client:acquire(name, { fair = 1 }) end, "fair must be a boolean")
  client:close()
end)

test("permits: a semaphore of 2 admits 2 and refuses a 3rd; another size is EINVAL", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local third = assert(dlock.open(URL))
  local name = unique("sem")
  local a = assert(client:acquire(name, { permits = 2, owner = "a" }))
  local b = assert(other:acquire(name, { permits = 2, owner = "b" }))
  local lock, msg, code = third:acquire(name, { permits = 2, wait_ms = 0 })
  assert(lock == nil and code == "NOT_ACQUIRED", msg)
  local info = assert(third:inspect(name))
  assert(info.permits == 2 and info.kind == "exclusive" and #info.holders == 2, info.permits)
  lock, msg, code = third:acquire(name, { permits = 3 })
  assert(lock == nil and code == "EINVAL", msg)
  assert(msg:find("2 permits", 1, true) and msg:find("3 permits", 1, true), msg)
  for _, mixed in ipairs({ {}, { shared = true } }) do  -- no lock kind on a held semaphore
    lock, msg, code = third:acquire(name, mixed)
    assert(lock == nil and code == "EINVAL", msg)
  end
  assert(a:release())
  local c = assert(third:acquire(name, { permits = 2 }))  -- a permit came free
  assert(c:fencing_token() > b:fencing_token())
  assert(b:release() and c:release())
  assert(assert(third:inspect(name)).permits == 0)  -- free: a lock again
  assert(assert(third:acquire(name, { permits = 3 })):release())  -- and any size once free
  client:close() other:close() third:close()
end)

test("take: a semaphore of 4, one hold takes 3; 2 more are refused, 1 is not", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local third = assert(dlock.open(URL))
  local name = unique("take")
  local three = assert(client:acquire(name, { permits = 4, take = 3, owner = "three" }))
  local info = assert(third:inspect(name))
  assert(info.permits == 4 and #info.holders == 1 and info.holders[1].owner == "three")
  local lock, msg, code = other:acquire(name, { permits = 4, take = 2, wait_ms = 0 })
  assert(lock == nil and code == "NOT_ACQUIRED", msg)  -- 2 more do not fit in the 1 left ...
  local one = assert(other:acquire(name, { permits = 4, take = 1, wait_ms = 0 }))  -- ... 1 does
  lock, msg, code = third:acquire(name, { permits = 4, wait_ms = 0 })
  assert(lock == nil and code == "NOT_ACQUIRED", msg)  -- and none is left
  assert(three:release())  -- frees all 3
  local again = assert(third:acquire(name, { permits = 4, take = 3, wait_ms = 0 }))
  assert(again:fencing_token() > one:fencing_token())
  assert(again:release() and one:release())
  assert(#assert(third:inspect(name)).holders == 0)
  -- several names, all or none, each taking 3
  local names = { unique("take-a"), unique("take-b") }
  local group = assert(client:acquire_many(names, { permits = 4, take = 3 }))
  for _, n in ipairs(names) do
    lock, msg, code = other:acquire(n, { permits = 4, take = 2, wait_ms = 0 })
    assert(lock == nil and code == "NOT_ACQUIRED", msg)
    assert(assert(other:acquire(n, { permits = 4, wait_ms = 0 })):release())
  end
  assert(group:release())
  -- a re-entry asks the same take
  local held = assert(client:acquire(name, { permits = 4, take = 2, reentrant = "job" }))
  local inner = assert(client:acquire(name, { permits = 4, take = 2, reentrant = "job" }))
  assert(inner:fencing_token() == held:fencing_token())
  lock, msg, code = client:acquire(name, { permits = 4, take = 3, reentrant = "job" })
  assert(lock == nil and code == "EINVAL" and msg:find("take", 1, true), msg)
  assert(inner:release() and held:release())
  client:close() other:close() third:close()
end)

test("take: 0, or more than the permits, is EINVAL in the library's words; bad types raise", function()
  local client = assert(dlock.open(URL))
  local name = unique("take")
  local lock, msg, code = client:acquire(name, { permits = 4, take = 0 })
  assert(lock == nil and code == "EINVAL" and msg:find("take", 1, true), msg)
  for _, opts in ipairs({ { permits = 4, take = 5 }, { take = 2 } }) do
    lock, msg, code = client:acquire(name, opts)
    assert(lock == nil and code == "EINVAL", msg)
    assert(msg:find("take", 1, true) and msg:find("permits", 1, true), msg)
  end
  assert(#assert(client:inspect(name)).holders == 0)  -- nothing taken
  raises(function() client:acquire(name, { permits = 4, take = -1 }) end, "take must be")
  raises(function() client:acquire(name, { permits = 4, take = 1.5 }) end, "take must be")
  raises(function() client:acquire(name, { permits = 4, take = "2" }) end, "take must be")
  raises(function() client:campaign(name, { take = 2 }) end, "a campaign takes no option 'take'")
  -- 1 is the default said aloud, with or without permits; all of them is fine
  assert(assert(client:acquire(name, { take = 1 })):release())
  assert(assert(client:acquire(name, { permits = 4, take = 4 })):release())
  client:close()
end)

test("tokens rise across kinds; shared with permits or against kind is refused", function()
  local client = assert(dlock.open(URL))
  local name = unique("tokens")
  local last = 0ULL
  for _, o in ipairs({ {}, { shared = true }, { shared = true }, { permits = 2 }, { kind = "shared" },
                       { shared = false } }) do
    local lock = assert(client:acquire(name, o))
    assert(lock:fencing_token() > last, lock:fencing_token_string())
    last = lock:fencing_token()
    assert(lock:release())
  end
  -- a shared semaphore: the library's EINVAL, in its words
  for _, o in ipairs({ { shared = true, permits = 2 }, { kind = "shared", permits = 2 } }) do
    local lock, msg, code = client:acquire(name, o)
    assert(lock == nil and code == "EINVAL" and msg:find("shared"), msg)
  end
  raises(function() client:acquire(name, { shared = true, kind = "exclusive" }) end, "contradicts")
  raises(function() client:acquire(name, { shared = false, kind = "shared" }) end, "contradicts")
  raises(function() client:acquire(name, { shared = "yes" }) end, "shared must be a boolean")
  assert(#assert(client:inspect(name)).holders == 0)  -- nothing taken
  -- agreeing words and permits 0 (off) are fine
  assert(assert(client:acquire(name, { shared = true, kind = "shared", permits = 0 })):release())
  client:close()
end)

local BINARY = "\0addr\255\0:8080\n\0"  -- NUL first, last and inside; not UTF-8

test("values: what acquire stores is what inspect shows, binary-safe; set_value replaces it", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local name = unique("value")
  local lock = assert(client:acquire(name, { value = BINARY, owner = "node-a", lease_ms = 5000 }))
  local h = assert(other:inspect(name)).holders[1]
  assert(type(h.value) == "string" and #h.value == #BINARY and h.value == BINARY, ("%q"):format(h.value))
  assert(h.owner == "node-a" and h.fencing_token == lock:fencing_token())
  assert(lock:set_value("replaced") == true)
  assert(assert(other:inspect(name)).holders[1].value == "replaced")
  assert(lock:extend(8000))  -- the lease renewed, the value kept
  assert(assert(other:inspect(name)).holders[1].value == "replaced")
  assert(lock:set_value(""))  -- removes it
  assert(assert(other:inspect(name)).holders[1].value == "")
  assert(lock:set_value(BINARY))
  assert(assert(other:inspect(name)).holders[1].value == BINARY)
  assert(lock:release())
  assert(#assert(other:inspect(name)).holders == 0)  -- gone with the hold
  local ok, msg, code = lock:set_value("late")
  assert(ok == nil and code == "NOT_HELD" and msg:find("released"), tostring(msg))
  -- no value: ""; client:run takes it too
  lock = assert(client:acquire(name))
  assert(assert(other:inspect(name)).holders[1].value == "")
  assert(lock:release())
  assert(client:run(name, { value = "in run" }, function()
    assert(assert(other:inspect(name)).holders[1].value == "in run")
  end))
  other:close()
  client:close()
end)

test("values: a deposed holder's set_value is NOT_HELD and changes nothing", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local name = unique("value-deposed")
  -- no heartbeats: nothing in the background notices the loss; set_value's own check does
  local deposed = assert(client:acquire(name, { value = "old leader", heartbeat_ms = 0 }))
  assert(cli("DEL", key(name)) == "1")  -- behind its back
  local successor = assert(other:acquire(name, { value = "new leader", wait_ms = 0 }))
  local ok, msg, code = deposed:set_value("still me")
  assert(ok == nil and code == "NOT_HELD" and #msg > 0, tostring(msg))
  local h = assert(other:inspect(name)).holders[1]
  assert(h.value == "new leader" and h.fencing_token == successor:fencing_token())
  assert(not deposed:valid())
  -- the refused set_value looked again: the successor holds it, named by its token
  assert(msg:find("was lost: taken_over: ", 1, true), msg)
  local cause = deposed:lost_cause()
  assert(cause and cause:find("^taken_over: "), tostring(cause))  -- the stable code first
  assert(cause:find("another owner holds it now (fencing token " .. successor:fencing_token_string() .. ")", 1, true),
    cause)
  assert(successor:lost_cause() == nil)                             -- held and valid
  ok, msg, code = deposed:release()
  assert(ok == nil and code == "NOT_HELD")
  assert(deposed:lost_cause() == nil)                               -- released: nothing to say
  -- The client counted the loss, under its cause, and the release that found it (its
  -- Prometheus text): one series per cause.
  local text = assert(client:metrics_text())
  assert(text:find('dlock_losses_total{cause="taken_over"} 1\n', 1, true), text)
  for _, other_cause in ipairs({ "refused", "expired", "deleted" }) do
    assert(text:find('dlock_losses_total{cause="' .. other_cause .. '"} 0\n', 1, true), text)
  end
  assert(text:find('dlock_releases_total{outcome="not_held"} 1\n', 1, true), text)
  assert(successor:release())
  -- with nobody after it: deleted, and nothing appears
  local lock = assert(client:acquire(name, { value = "v", heartbeat_ms = 0 }))
  cli("DEL", key(name))
  ok, msg, code = lock:set_value("w")
  assert(ok == nil and code == "NOT_HELD", tostring(msg))
  assert(msg:find("was lost: deleted: ", 1, true), msg)
  cause = lock:lost_cause()
  assert(cause and cause:find("^deleted: "), tostring(cause))
  assert(#assert(client:inspect(name)).holders == 0)
  lock:release()
  assert(assert(client:metrics_text()):find('dlock_losses_total{cause="deleted"} 1\n', 1, true))
  other:close()
  client:close()
end)

test("values: too long is EINVAL naming the limit; wrong types raise", function()
  assert(dlock.MAX_VALUE_BYTES == 4096)  -- as documented
  local client = assert(dlock.open(URL))
  local name = unique("value-limit")
  local longest = string.rep("\0\1\2\3", dlock.MAX_VALUE_BYTES / 4)
  local lock, msg, code = client:acquire(name, { value = longest .. "x" })
  assert(lock == nil and code == "EINVAL" and msg:find(tostring(dlock.MAX_VALUE_BYTES)), tostring(msg))
  assert(#assert(client:inspect(name)).holders == 0)
  lock = assert(client:acquire(name, { value = longest }))
  assert(assert(client:inspect(name)).holders[1].value == longest)
  local ok
  ok, msg, code = lock:set_value(longest .. "x")
  assert(ok == nil and code == "EINVAL" and msg:find(tostring(dlock.MAX_VALUE_BYTES)), tostring(msg))
  assert(assert(client:inspect(name)).holders[1].value == longest)  -- unchanged
  raises(function() client:acquire(name, { value = 5 }) end, "bad argument #2 to 'acquire' %(value must be a string")
  raises(function() lock:set_value(nil) end, "bad argument #1 to 'set_value'")
  raises(function() lock:set_value({}) end, "bad argument #1 to 'set_value'")
  raises(function() lock.set_value("x") end, "lock:set_value")
  assert(lock:release())
  client:close()
end)

test("campaign, leader, proclaim, resign", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local name = unique("election")
  local none, msg = other:leader(name)
  assert(none == nil and msg == nil)  -- nobody leads: nil, with no message
  local leadership = assert(client:campaign(name, { value = "10.0.0.7:8080", owner = "node-a",
    lease_ms = 5000 }))
  assert(getmetatable(leadership) == dlock.Lock and leadership:valid())
  local leader = assert(other:leader(name))
  assert(leader.value == "10.0.0.7:8080" and leader.owner == "node-a")
  assert(leader.fencing_token == leadership:fencing_token())  -- the term
  assert(leader.remaining_ms > 0 and leader.remaining_ms <= 5000)
  assert(leadership:set_value("10.0.0.7:9090"))  -- proclaim
  assert(assert(other:leader(name)).value == "10.0.0.7:9090")
  assert(leadership:release())  -- resign
  assert(other:leader(name) == nil)
  local again = assert(client:campaign(name))  -- a new term, above the last
  assert(again:fencing_token() > leader.fencing_token)
  assert(assert(other:leader(name)).value == "")
  assert(again:release())
  -- what a leadership is not: raised, like unknown options
  for _, opts in ipairs({ { shared = true }, { permits = 2 }, { kind = "exclusive" }, { wait_ms = 0 } }) do
    local k = next(opts)
    raises(function() client:campaign(name, opts) end, "a campaign takes no option '" .. k .. "'")
  end
  raises(function() client:campaign(name, { value = 1 }) end, "bad argument #2 to 'campaign'")
  raises(function() client:campaign(5) end, "bad argument #1 to 'campaign'")
  raises(function() client.campaign(name) end, "client:campaign")
  local l, m, code = client:campaign(name, { value = string.rep("x", dlock.MAX_VALUE_BYTES + 1) })
  assert(l == nil and code == "EINVAL", tostring(m))
  assert(other:leader(name) == nil)
  -- a name held shared, or a semaphore, is no election
  local r = assert(client:acquire(name, { shared = true }))
  l, m, code = other:leader(name)
  assert(l == nil and code == "EINVAL" and m:find("shared"), tostring(m))
  assert(r:release())
  local p = assert(client:acquire(name, { permits = 2 }))
  l, m, code = other:leader(name)
  assert(l == nil and code == "EINVAL" and m:find("semaphore"), tostring(m))
  assert(p:release())
  l, m, code = other:leader("")
  assert(l == nil and code == "EINVAL")
  raises(function() other:leader(5) end, "bad argument #1 to 'leader'")
  other:close()
  l, m, code = other:leader(name)
  assert(l == nil and code == "EINVAL" and m:find("closed"), tostring(m))
  client:close()
end)

test("two candidates: the second leads once the first resigns, with a greater term", function()
  local client = assert(dlock.open(URL))
  local name = unique("election")
  local first = assert(client:campaign(name, { value = "first" }))
  local second = spawn(name, [[
      local l, err, code = c:campaign(name, { value = "second\0" })
      if not l then print("FAIL " .. tostring(code) .. " " .. tostring(err)) return end
      local leader = assert(c:leader(name))
      print(l:fencing_token_string() .. " " .. string.format("%d", leader.fencing_token)
        .. " " .. string.format("%q", leader.value))
      assert(l:release())]])
  assert(wait_for(function() return cli("ZCARD", key(name) .. ":line") == "1" end, 20),
    "the second candidate is not waiting")
  assert(assert(client:leader(name)).value == "first")  -- still the first's term
  local first_term = first:fencing_token()
  assert(first:release())  -- resign
  local out = second:read("*a")
  second:close()
  local term, leader_term, value = out:match("^(%d+) (%d+) (.-)\n$")
  assert(term, out)
  assert(dlock.token(term) > first_term, out)
  assert(term == leader_term and value == string.format("%q", "second\0"), out)
  assert(client:leader(name) == nil)
  client:close()
end)

-- Observer reports are collected in seen (false for "nobody leads"); next_report(client, seen)
-- dispatches until one is there (at most timeout s, default 5) and takes the oldest.
local function collector()
  local seen = {}
  return seen, function(leader) seen[#seen + 1] = leader or false end
end
local function next_report(client, seen, timeout)
  local deadline = now() + (timeout or 5)
  while #seen == 0 and now() < deadline do assert(client:dispatch(100)) end
  assert(#seen > 0, "no report within " .. (timeout or 5) .. " s")
  return table.remove(seen, 1)
end

test("observe: nobody, a campaign's term and value, a proclaim, a resign; nothing after cancel", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local name = unique("observe")
  local seen, fn = collector()
  local ob
  ob = assert(client:observe(name, function(leader, o)
    assert(o == ob, "fn's second argument is its observer")
    fn(leader)
  end))
  assert(getmetatable(ob) == dlock.Observer and ob.name == name and not ob:cancelled())
  assert(tostring(ob) == string.format("dlock.observer(%q, observing)", name), tostring(ob))
  assert(#seen == 0, "a report before dispatch")  -- delivered on this thread, when asked
  assert(next_report(client, seen) == false)  -- first, as it stands: nobody leads
  local leadership = assert(other:campaign(name, { value = "10.0.0.7:8080", owner = "node-a",
    lease_ms = 5000 }))
  local r = next_report(client, seen)
  assert(r, "nobody leads, after the campaign")
  assert(r.fencing_token == leadership:fencing_token(), "the term")
  assert(r.value == "10.0.0.7:8080" and r.owner == "node-a", r.value)
  assert(r.remaining_ms > 0 and r.remaining_ms <= 5000, r.remaining_ms)
  assert(leadership:set_value("10.0.0.7:9090\0bin"))  -- proclaim (binary-safe)
  r = next_report(client, seen, 2)
  assert(r and r.value == "10.0.0.7:9090\0bin" and r.fencing_token == leadership:fencing_token())
  assert(leadership:release())  -- resign
  assert(next_report(client, seen, 2) == false)
  assert(#seen == 0, "more reports than changes")
  -- cancelled: no report for a change made afterwards, however long dispatch waits
  assert(ob:cancel() == true and ob:cancel() == true and ob:cancelled())  -- idempotent
  assert(tostring(ob):find("cancelled"))
  local again = assert(other:campaign(name, { value = "after cancel" }))
  local t0 = now()
  assert(client:dispatch(1200) == 0)
  assert(now() - t0 >= 1.1, "dispatch returned before its timeout with nothing delivered")
  assert(client:poll() == 0 and #seen == 0, "a report after cancel")
  assert(again:release())
  other:close()
  client:close()
end)

test("observe: several observers, one client; dispatch and poll; fn's errors; close ends them", function()
  local client = assert(dlock.open(URL))
  local other = assert(dlock.open(URL))
  local n1, n2 = unique("observe"), unique("observe")
  local seen1, fn1 = collector()
  local seen2, fn2 = collector()
  local seen3, fn3 = collector()
  local ob1 = assert(client:observe(n1, fn1))
  local ob2 = assert(client:observe(n2, fn2))
  local ob3 = assert(client:observe(n1, fn3))  -- a second observer of the same name
  -- the three first reports: dispatch returns as soon as it has delivered something
  assert(wait_for(function() client:dispatch(100) return #seen1 + #seen2 + #seen3 == 3 end))
  assert(seen1[1] == false and seen2[1] == false and seen3[1] == false)
  seen1[1], seen2[1], seen3[1] = nil, nil, nil
  local t0 = now()
  local l1 = assert(other:acquire(n1, { value = "one" }))  -- an acquire leads as well
  local delivered = client:dispatch(10000)
  assert(delivered >= 1 and now() - t0 < 5, "dispatch waited for its whole timeout")
  assert(wait_for(function() client:dispatch(100) return #seen1 == 1 and #seen3 == 1 end))
  assert(seen1[1].value == "one" and seen3[1].value == "one" and #seen2 == 0)
  assert(seen1[1] ~= seen3[1], "observers share a report table")
  -- poll delivers what waits, without waiting; pollfd turns readable when something does
  local l2 = assert(other:acquire(n2, { value = "two" }))
  ffi.cdef [[ struct test_pollfd { int fd; short events; short revents; };
              int poll(struct test_pollfd *fds, unsigned long nfds, int timeout); ]]
  local pfd = ffi.new("struct test_pollfd[1]")
  pfd[0].fd, pfd[0].events = assert(client:pollfd()), 1
  assert(ffi.C.poll(pfd, 1, 5000) == 1, "pollfd did not turn readable")
  assert(client:poll() == 1 and #seen2 == 1 and seen2[1].value == "two")
  assert(ffi.C.poll(pfd, 1, 0) == 0, "pollfd still readable after poll delivered everything")
  -- an error in fn is written to stderr and ignored: later reports still come
  local calls, written = 0, {}
  local stderr = io.stderr
  io.stderr = { write = function(_, ...) for _, v in ipairs({ ... }) do written[#written + 1] = v end end }
  local ok, err = pcall(function()
    local ob4 = assert(client:observe(n2, function() calls = calls + 1 error("observer boom") end))
    assert(wait_for(function() client:dispatch(100) return calls == 1 end))
    assert(l2:release())
    assert(wait_for(function() client:dispatch(100) return calls == 2 and #seen2 == 2 end))
    return ob4
  end)
  io.stderr = stderr
  assert(ok, err)
  local ob4 = err
  written = table.concat(written)
  assert(select(2, written:gsub("dlock: error in observe callback %(ignored%): [^\n]*observer boom\n", "")) == 2,
    written)
  assert(seen2[2] == false)
  -- fn cancels its own observer: nothing more for it
  local own = {}
  local ob5
  ob5 = assert(client:observe(n1, function(leader)
    own[#own + 1] = leader or false
    ob5:cancel()
  end))
  assert(wait_for(function() client:dispatch(100) return #own == 1 end))
  assert(own[1].value == "one" and ob5:cancelled())
  assert(l1:set_value("one, again"))
  assert(wait_for(function() client:dispatch(100) return #seen1 == 2 and #seen3 == 2 end))
  assert(seen1[2].value == "one, again" and #own == 1)
  -- close cancels every observer; the handles stay usable
  client:close()
  assert(ob1:cancelled() and ob2:cancelled() and ob3:cancelled() and ob4:cancelled())
  assert(ob1:cancel() == true)
  local r, msg, code = client:dispatch(10)
  assert(r == nil and code == "EINVAL" and msg:find("closed"), tostring(msg))
  r, msg, code = client:observe(n1, print)
  assert(r == nil and code == "EINVAL" and msg:find("closed"), tostring(msg))
  r, msg, code = client:pollfd()
  assert(r == nil and code == "EINVAL")
  assert(client:poll() == 0)
  assert(l1:release())
  other:close()
end)

test("observe: a name held shared reads as nobody; bad arguments; a forgotten client's observers", function()
  local client = assert(dlock.open(URL))
  local name = unique("observe")
  local r = assert(client:acquire(name, { shared = true }))
  local seen, fn = collector()
  local ob = assert(client:observe(name, fn))
  assert(next_report(client, seen) == false)
  assert(r:release())
  ob:cancel()
  -- nothing to deliver: dispatch waits out its timeout (0: not at all)
  local t0 = now()
  assert(client:dispatch(0) == 0 and client:dispatch(200) == 0)
  assert(now() - t0 >= 0.15)
  local o, msg, code = client:observe("", print)
  assert(o == nil and code == "EINVAL", tostring(msg))
  o, msg, code = client:observe(string.rep("n", dlock.MAX_NAME_BYTES + 1), print)
  assert(o == nil and code == "EINVAL", tostring(msg))
  raises(function() client:observe(5, print) end, "bad argument #1 to 'observe'")
  raises(function() client:observe(name) end, "bad argument #2 to 'observe' %(function expected")
  raises(function() client:observe(name .. "\0", print) end, "bad argument #1 to 'observe'")
  raises(function() client.observe(name, print) end, "client:observe")
  raises(function() client:dispatch("1") end, "bad argument #1 to 'dispatch'")
  raises(function() client:dispatch(1.5) end, "bad argument #1 to 'dispatch'")
  raises(function() client:dispatch(-2) end, "bad argument #1 to 'dispatch'")
  raises(function() client.dispatch(5) end, "client:dispatch")
  raises(function() ob.cancel() end, "observer:cancel")
  -- a client left to the GC with observers: collected with it (their finalizers cancel them,
  -- without I/O), and the client is closed at the next safe point
  local before = threads()
  local function forget_observing()
    local c = assert(dlock.open(URL))
    assert(c:observe(name, print))
    assert(c:observe(unique("observe"), print))
  end
  forget_observing()
  collectgarbage() collectgarbage()
  client:poll()
  assert(threads() == before, "the forgotten client's thread is still running")
  client:close()
end)

test("limits are the library's; a client shows its URL without the password", function()
  assert(dlock.MAX_NAME_BYTES == 1024 and dlock.MAX_OWNER_BYTES == 256)  -- as documented
  local client = assert(dlock.open(URL))
  local name = string.rep("n", dlock.MAX_NAME_BYTES)
  assert(assert(client:acquire(name, { owner = string.rep("o", dlock.MAX_OWNER_BYTES) })):release())
  local lock, msg, code = client:acquire(name .. "n")
  assert(lock == nil and code == "EINVAL" and msg:find(tostring(dlock.MAX_NAME_BYTES)), msg)
  lock, msg, code = client:acquire(unique(), { owner = string.rep("o", dlock.MAX_OWNER_BYTES + 1) })
  assert(lock == nil and code == "EINVAL" and msg:find(tostring(dlock.MAX_OWNER_BYTES)), msg)
  assert(tostring(client) == "dlock.client(" .. URL .. ", open)", tostring(client))
  client:close()
  local user = unique("user")
  cli("ACL", "SETUSER", user, "on", ">s3cret-pw", "~*", "&*", "+@all")
  local c = assert(dlock.open("redis://" .. user .. ":s3cret-pw@127.0.0.1:" .. PORT .. "/0"))
  cli("ACL", "DELUSER", user)
  c:close()
  assert(tostring(c) == "dlock.client(redis://" .. user .. ":***@127.0.0.1:" .. PORT .. "/0, closed)",
    tostring(c))
end)

-- ----- several names at once ---------------------------------------------------------------

test("acquire_many: all or none while one name is held elsewhere; then each lock its own token", function()
  local a = assert(dlock.open(URL))
  local b = assert(dlock.open(URL))
  local base = unique("many")
  local n1, n2, n3 = base .. "/1", base .. "/2", base .. "/3"
  local held = assert(a:acquire(n2))
  -- n2 is refused: nothing is held, neither n1 (before it, bytewise) nor n3.
  local group, msg, code = b:acquire_many({ n3, n2, n1 }, { wait_ms = 0 })
  assert(group == nil and code == "NOT_ACQUIRED", tostring(msg))
  assert(msg:find(n2, 1, true), msg)
  assert(cli("EXISTS", key(n1)) == "0" and cli("EXISTS", key(n3)) == "0")
  local t0 = now()
  group, msg, code = b:acquire_many({ n3, n2, n1 }, { wait_ms = 200 })
  assert(group == nil and code == "NOT_ACQUIRED", tostring(msg))
  assert(now() - t0 >= 0.15, "did not wait")
  assert(cli("EXISTS", key(n1)) == "0" and cli("EXISTS", key(n3)) == "0")
  assert(#a:inspect(n1).holders == 0)
  assert(held:release())

  group = assert(b:acquire_many({ n3, n2, n1 }, { lease_ms = 5000, owner = "many" }))
  assert(getmetatable(group) == dlock.Group and #group == 3)
  assert(group[1].name == n3 and group[2].name == n2 and group[3].name == n1)
  assert(group:valid() and not group:released())
  local seen = {}
  for k, lock in ipairs(group) do
    assert(lock:valid() and lock:remaining_ms() <= 5000)
    local token = lock:fencing_token()
    assert(ffi.istype("uint64_t", token) and token > 0)
    assert(not seen[lock:fencing_token_string()], "two locks with one token")
    seen[lock:fencing_token_string()] = true
    local info = a:inspect(lock.name)
    assert(#info.holders == 1 and info.holders[1].fencing_token == token and info.holders[1].owner == "many",
      "inspect of names[" .. k .. "]")
  end
  assert(group[2]:fencing_token() > held:fencing_token())
  assert(group[1]:extend(30000))  -- one lock alone
  assert(tonumber(cli("PTTL", key(n3))) > 10000 and tonumber(cli("PTTL", key(n2))) <= 5000)
  assert(tostring(group):find("dlock.group(", 1, true))
  -- Held: the other client gets none of them, in any order.
  local group2
  group2, msg, code = a:acquire_many({ n1, n2 }, { wait_ms = 0 })
  assert(group2 == nil and code == "NOT_ACQUIRED", tostring(msg))
  assert(group:release() == true)
  assert(group:released() and not group:valid())
  for _, n in ipairs({ n1, n2, n3 }) do assert(cli("EXISTS", key(n)) == "0", n) end
  local ok
  ok, msg, code = group:release()
  assert(ok == nil and code == "NOT_HELD" and msg:find("already released", 1, true), tostring(msg))
  -- Another client takes them all now, each with a greater token.
  local again = assert(a:acquire_many({ n1, n3 }, { wait_ms = 0 }))
  assert(again[1]:fencing_token() > group[3]:fencing_token())
  assert(dlock.release_many(again))
  a:close()
  b:close()
end)

test("acquire_many: a group release names the lost lock and releases the others", function()
  local c = assert(dlock.open(URL))
  local op = assert(dlock.open(URL))
  local base = unique("many-lost")
  local na, nb, nc = base .. "/a", base .. "/b", base .. "/c"
  local group = assert(c:acquire_many({ na, nb, nc }, { lease_ms = 10000, heartbeat_ms = 0 }))
  assert(op:break_lock(nb, "taken for the test", true))
  local ok, msg, code = group:release()
  assert(ok == nil and code == "NOT_HELD", tostring(msg))
  assert(msg:find(nb, 1, true), msg)
  assert(not msg:find(na, 1, true) and not msg:find(nc, 1, true), msg)
  assert(cli("EXISTS", key(na)) == "0" and cli("EXISTS", key(nc)) == "0")
  assert(group:released())
  -- Two lost: the message names both; dlock.release_many on a plain array of locks.
  group = assert(c:acquire_many({ na, nb, nc }, { lease_ms = 10000, heartbeat_ms = 0 }))
  assert(op:break_lock(na, "", true))
  assert(cli("DEL", key(nc)) == "1")
  ok, msg, code = dlock.release_many({ group[1], group[2], group[3] })
  assert(ok == nil and code == "NOT_HELD", tostring(msg))
  assert(msg:find(na, 1, true) and msg:find(nc, 1, true) and not msg:find(nb, 1, true), msg)
  assert(cli("EXISTS", key(nb)) == "0")
  -- A lock released alone is skipped by the group's release.
  group = assert(c:acquire_many({ na, nb }))
  assert(group[1]:release())
  assert(group:release() == true)
  assert(cli("EXISTS", key(nb)) == "0")
  assert(dlock.release_many({}) == true)
  -- on_lost: one function for the group, called with the lock lost; the others stay held.
  local lost = {}
  group = assert(c:acquire_many({ na, nb }, { lease_ms = 2000, heartbeat_ms = 150,
    on_lost = function(l) lost[#lost + 1] = l end }))
  cli("DEL", key(nb))
  assert(wait_for(function() c:poll() return #lost > 0 end, 5), "on_lost never ran")
  assert(lost[1] == group[2] and group[1]:valid() and not group[2]:valid())
  ok, msg, code = group:release()
  assert(ok == nil and code == "NOT_HELD" and msg:find(nb, 1, true), tostring(msg))
  assert(#lost == 1)
  -- Locks of a closed client: every one is reported.
  group = assert(c:acquire_many({ na, nb }))
  c:close()
  ok, msg, code = group:release()
  assert(ok == nil and code == "NOT_HELD" and msg:find(na, 1, true) and msg:find(nb, 1, true), tostring(msg))
  op:close()
end)

test("acquire_many: a name given twice or no names are EINVAL; wrong arguments raise", function()
  local c = assert(dlock.open(URL))
  local base = unique("many-dup")
  local x, y = base .. "/x", base .. "/y"
  local group, msg, code = c:acquire_many({ x, y, x })
  assert(group == nil and code == "EINVAL" and msg:find(x, 1, true), tostring(msg))
  assert(cli("EXISTS", key(x)) == "0" and cli("EXISTS", key(y)) == "0")
  group, msg, code = c:acquire_many({})
  assert(group == nil and code == "EINVAL", tostring(msg))
  group, msg, code = c:acquire_many({ x, "" })
  assert(group == nil and code == "EINVAL", tostring(msg))
  group, msg, code = c:acquire_many({ x, y }, { lease_ms = 1000, heartbeat_ms = 1000 })
  assert(group == nil and code == "EINVAL", tostring(msg))
  assert(cli("EXISTS", key(x)) == "0")
  raises(function() c:acquire_many(x) end, "bad argument #1 to 'acquire_many' %(table of names expected")
  raises(function() c:acquire_many({ x, 5 }) end, "names%[2%] must be a string")
  raises(function() c:acquire_many({ "a\0b" }) end, "NUL")
  raises(function() c:acquire_many({ x }, { leaseMs = 5 }) end, "unknown option 'leaseMs'")
  raises(function() c:acquire_many({ x }, { on_release_requested = function() end }) end, "on_release_requested")
  raises(function() c.acquire_many({ x }) end, "client:acquire_many")
  raises(function() dlock.release_many("x") end, "bad argument #1 to 'release_many'")
  raises(function() dlock.release_many({ 5 }) end, "locks%[1%] is not a lock")
  c:close()
  group, msg, code = c:acquire_many({ x })
  assert(group == nil and code == "EINVAL" and msg:find("closed"), tostring(msg))
end)

test("acquire_many: {a, b} and {b, a} in two processes at once never deadlock", function()
  local base = unique("many-order")
  local x, y = base .. "/x", base .. "/y"
  -- Each holds both for 1 ms a round: the two runs overlap (the other process starts in ~30 ms).
  local rounds = 200
  local p = spawn(x, string.format([[
    ffi.cdef("int usleep(unsigned int usec);")
    for i = 1, %d do
      local g = assert(c:acquire_many({ %q, %q }, { wait_ms = 20000 }))
      ffi.C.usleep(1000)
      assert(g:release())
    end
    print("DONE")]], rounds, x, y))
  local c = assert(dlock.open(URL))
  for _ = 1, rounds do
    local g = assert(c:acquire_many({ y, x }, { wait_ms = 20000 }))
    sleep(0.001)
    assert(g:release())
  end
  local out = p:read("*a")
  p:close()
  assert(out:find("DONE"), "the other process: " .. out)
  assert(cli("EXISTS", key(x)) == "0" and cli("EXISTS", key(y)) == "0")
  c:close()
end)

test("close releases what the client holds", function()
  local client = assert(dlock.open(URL))
  local name = unique()
  local lock = assert(client:acquire(name, { lease_ms = 0 }))
  assert(cli("EXISTS", key(name)) == "1")
  client:close()
  assert(cli("EXISTS", key(name)) == "0")
  assert(not lock:valid())
  local ok, _, code = lock:release()
  assert(ok == nil and code == "NOT_HELD")
end)

test("a URL's password shows in no error, even holding / # ? unencoded", function()
  -- The password is Xq7Zk9, cut by an unencoded '/', '?' or '#': no piece of it may show.
  for _, url in ipairs({ "redis://app:Xq7/Zk9@127.0.0.1:" .. PORT, "redis://:Xq7#Zk9@127.0.0.1:" .. PORT,
                         "redis://u:Xq7?Zk9@127.0.0.1:" .. PORT, "redis://u:12/Xq7Zk9@127.0.0.1:" .. PORT,
                         "redis-sentinel://127.0.0.1:" .. PORT .. "/m?sentinel_password=Xq7&Zk9" }) do
    local c, msg, code = dlock.open(url)
    assert(c == nil and code == "EINVAL", url .. ": " .. tostring(msg))
    assert(not msg:find("Xq7", 1, true) and not msg:find("Zk9", 1, true), url .. " shows: " .. msg)
    assert(msg:find("percent-encode", 1, true), msg)
  end
  -- A sentinel_password= is hidden like a password where the library shows the URL.
  local c, msg = dlock.open("redis-sentinel://127.0.0.1:1/m?sentinel_password=Xq7Zk9&connect_timeout_ms=100")
  assert(c == nil and not msg:find("Xq7Zk9", 1, true), msg)
end)

-- ----------------------------------------------------------------------------------------------

io.stdout:write("luajit binding: dlock ", dlock.version(), " from ", dlock.library_path, "\n")
local passed, failed = 0, 0
for _, name in ipairs(order) do
  local t0 = now()
  local ok, err = xpcall(tests[name], debug.traceback)
  if ok then
    passed = passed + 1
    io.stdout:write(string.format("ok    %s (%.2f s)\n", name, now() - t0))
  else
    failed = failed + 1
    io.stdout:write(string.format("FAIL  %s\n%s\n", name, tostring(err)))
  end
  io.stdout:flush()
end
io.stdout:write(string.format("luajit: %d passed, %d failed\n", passed, failed))
os.exit(failed == 0 and 0 or 1)
