-- The nginx test's application: locations that hold, wait for, and run under dlock locks
-- (tests/nginx/run.sh, bench.sh). Two clients per worker: "yield" (the default under nginx:
-- waits yield) and "block" (opened with blocking = true: the library's blocking calls, as
-- before), so that one nginx shows both.
local dlock = require("dlock")
local semaphore = require("ngx.semaphore")

local M = {}
local clients = {}
local state = {}      -- name -> "held" | "releasing", set by /hold
local letgo = {}      -- name -> semaphore /hold waits on once its 500 ms are up
local lost = {}       -- name -> what on_lost saw
local kept = {}       -- name -> a lock kept alive for the loss tests
local inside = {}     -- name -> holders inside /contend's critical section now
local overlaps = {}   -- name -> times /contend found someone else inside
local phase = {}      -- what the log phase saw

M.init_refusal = "dlock.open was not tried in init_by_lua"

-- init_by_lua: the master process. dlock.open must refuse here.
function M.init()
  local ok, err = pcall(dlock.open, os.getenv("REDIS_URL"))
  M.init_refusal = ok and "dlock.open succeeded in the master process" or tostring(err)
end

-- What the observer started in init_worker last heard: the leader's value, "nobody", or
-- "nothing yet".
local current = "nothing yet"

function M.init_worker()
  local url = assert(os.getenv("REDIS_URL"), "env REDIS_URL; missing from nginx.conf")
  clients.yield = assert(dlock.open(url))
  clients.block = assert(dlock.open(url, { blocking = true }))
  -- An observer for the worker's life, kept by its client: /observe_init campaigns for it.
  assert(clients.yield:observe("init-observed-" .. ngx.worker.pid(), function(leader)
    current = leader and leader.value or "nobody"
  end))
end

local function args()
  local a = ngx.req.get_uri_args()
  local c = clients[a.mode or "yield"]
  if not c then error("mode must be yield or block") end
  return a, c
end

local function now()
  ngx.update_time()
  return string.format("%.3f", ngx.now())
end

local function failed(code, err)
  ngx.status = 503
  ngx.say("ERR ", code, " ", err)
end

function M.ping() ngx.say("pong ", now()) end

function M.init_refused() ngx.say(M.init_refusal) end

-- Holds the lock for ms (500) milliseconds, and then until /letgo, so that the test's pings
-- fall inside the hold however loaded the machine is.
function M.hold()
  local a, c = args()
  local started = now()
  local lock, err, code = c:acquire(a.name, { lease_ms = 10000 })
  if not lock then return failed(code, err) end
  state[a.name] = "held"
  local go = semaphore.new(0)
  letgo[a.name] = go
  ngx.sleep(tonumber(a.ms or 500) / 1000)
  go:wait(10)
  letgo[a.name] = nil
  state[a.name] = "releasing"
  local released_at = now()
  local ok, rerr = lock:release()
  ngx.say("token=", lock:fencing_token_string(), " started=", started, " released_at=",
    released_at, " release=", ok and "ok" or rerr)
end

function M.letgo()
  local go = letgo[ngx.var.arg_name]
  if go then go:post(1) end
  ngx.say(go and "ok" or "no holder")
end

-- Waits for the lock (without limit, the default, unless wait_ms is given); says when it got it
-- and what the holder was doing then.
function M.wait()
  local a, c = args()
  local started = now()
  local lock, err, code = c:acquire(a.name, { wait_ms = a.wait_ms and tonumber(a.wait_ms) })
  local at = now()
  if not lock then return failed(code, err .. " started=" .. started .. " at=" .. at) end
  local holder = state[a.name] or "none"
  local ok, rerr = lock:release()
  ngx.say("token=", lock:fencing_token_string(), " started=", started, " acquired_at=", at,
    " holder=", holder, " release=", ok and "ok" or rerr)
end

-- One contender: acquire, hold hold_ms (yielding), release. Counts overlaps.
function M.contend()
  local a, c = args()
  local name = a.name
  local lock, err, code = c:acquire(name, { wait_ms = tonumber(a.wait_ms or 10000) })
  if not lock then return failed(code, err) end
  inside[name] = (inside[name] or 0) + 1
  if inside[name] ~= 1 then overlaps[name] = (overlaps[name] or 0) + 1 end
  ngx.sleep(tonumber(a.hold_ms or 5) / 1000)
  inside[name] = inside[name] - 1
  local ok, rerr = lock:release()
  if not ok then return failed("release", rerr) end
  ngx.say("ok ", lock:fencing_token_string())
end

function M.overlaps() ngx.say(overlaps[ngx.var.arg_name] or 0) end

-- A lock with on_lost (delivered by the worker's timer), or without (then the error log says it).
function M.lost()
  local a, c = args()
  local opts = { lease_ms = 1500 }
  if a.listener == "1" then
    opts.on_lost = function(l)
      lost[l.name] = "lost token=" .. l:fencing_token_string() .. " valid=" .. tostring(l:valid())
        .. " phase=" .. ngx.get_phase()
    end
  end
  local lock, err, code = c:acquire(a.name, opts)
  if not lock then return failed(code, err) end
  kept[a.name] = lock
  ngx.say("token=", lock:fencing_token_string())
end

function M.lost_status() ngx.say(lost[ngx.var.arg_name] or "no") end

-- client:run: fn's error raised again after the release; fn's results returned.
function M.run()
  local a, c = args()
  local boom = { code = 42 }
  local seen
  local ok, err = pcall(c.run, c, a.name, { wait_ms = 1000 }, function(lock)
    seen = lock
    ngx.sleep(0.01)
    error(boom)
  end)
  ngx.say("raised=", tostring(not ok and err == boom), " released=", tostring(seen:released()),
    " holders=", #assert(c:inspect(a.name)).holders)
  local r1, r2, r3 = c:run(a.name, nil, function(lock)
    ngx.sleep(0.01)
    return "x", lock:fencing_token_string()
  end)
  ngx.say("results=", tostring(r1), ",", tostring(r2), ",", tostring(r3 ~= nil),
    " holders=", #assert(c:inspect(a.name)).holders)
end

-- Acquires here; the log phase (which cannot yield) releases it without waiting, and its
-- acquire and set_value are refused.
function M.logphase()
  local a, c = args()
  local lock, err, code = c:acquire(a.name, { lease_ms = 10000 })
  if not lock then return failed(code, err) end
  ngx.ctx.lock = lock
  ngx.say("token=", lock:fencing_token_string())
end

function M.logphase_log()
  local lock = ngx.ctx.lock
  if not lock then return end
  local ok, err = pcall(lock.set_value, lock, "in the log phase")
  phase.set_value = ok and "set in the log phase" or tostring(err)
  phase.release = tostring(lock:release())
  local ok, err = pcall(clients.yield.acquire, clients.yield, lock.name .. "-other")
  phase.acquire = ok and "acquired in the log phase" or tostring(err)
end

function M.logphase_status()
  ngx.say("release=", tostring(phase.release), "\nacquire=", tostring(phase.acquire),
    "\nset_value=", tostring(phase.set_value))
end

-- A light thread killed while it waits: the lock its acquire wins later is given back (by the
-- worker's timer, about a second later), not kept and renewed forever.
function M.killed()
  local a, c = args()
  local holder = assert(c:acquire(a.name))
  local waiter = ngx.thread.spawn(function() return c:acquire(a.name, { wait_ms = 10000 }) end)
  ngx.sleep(0.05)
  local ok, err = ngx.thread.kill(waiter)
  assert(holder:release())
  ngx.say("killed=", tostring(ok), " ", tostring(err))
end

-- Leader election in a worker: a campaign that waits yields (a light thread campaigns while the
-- leader holds), and so does set_value (leader is a blocking call); the second candidate leads
-- only once the first resigned, with a greater term.
function M.elect()
  local a, c = args()
  local first, err, code = c:campaign(a.name, { value = "first" })
  if not first then return failed(code, err) end
  local resigned = false
  local second = ngx.thread.spawn(function()
    local l, e, k = c:campaign(a.name, { value = "second" })
    if not l then return nil, k .. " " .. e end
    local saw = resigned  -- must be true: it leads only after the resignation
    local leader = assert(c:leader(a.name))
    assert(l:release())
    return l:fencing_token(), saw, leader.value
  end)
  ngx.sleep(0.05)  -- the second candidate is waiting (yielding) meanwhile
  assert(first:set_value("first, proclaimed"))
  local proclaimed = assert(c:leader(a.name)).value
  resigned = true
  assert(first:release())
  local ok, term, saw, value = ngx.thread.wait(second)
  ngx.say("ok=", tostring(ok), " proclaimed=", proclaimed, " greater=",
    tostring(term ~= nil and term > first:fencing_token()), " after_resign=", tostring(saw),
    " leader=", tostring(value), " now=", tostring(c:leader(a.name)))
end

-- lock:set_value in a worker: with the yielding client it yields (the light thread calling it
-- has not finished when ngx.thread.spawn returns), with the blocking one it does not; leader
-- shows the new value; a deposed holder's (its lease left to run out) is NOT_HELD and writes
-- nothing.
function M.setvalue()
  local a, c = args()
  local lock, err, code = c:acquire(a.name, { lease_ms = 10000, value = "v0" })
  if not lock then return failed(code, err) end
  local finished = false
  local t = ngx.thread.spawn(function()
    local ok, e, k = lock:set_value("v1")
    finished = true
    return ok, e, k
  end)
  local yielded = not finished
  local _, ok, e, k = ngx.thread.wait(t)
  local value = assert(c:leader(a.name)).value
  assert(lock:release())
  local short = assert(c:acquire(a.name, { lease_ms = 100, heartbeat_ms = 0, value = "short" }))
  ngx.sleep(0.3)
  local dok, _, dcode = short:set_value("late")
  ngx.say("yielded=", tostring(yielded), " set=", tostring(ok), ",", tostring(k or e),
    " value=", tostring(value), " deposed=", tostring(dok), ",", tostring(dcode),
    " after=", tostring(c:leader(a.name)))
  short:release()
end

-- client:inspect and client:leader in a worker: with the yielding client they yield (the light
-- thread calling them has not finished when ngx.thread.spawn returns), with the blocking one
-- they do not; both show the holder with its value and term; the leader of a shared name is
-- EINVAL.
function M.inspect()
  local a, c = args()
  local lock, err, code = c:acquire(a.name, { lease_ms = 10000, value = "v0", owner = "me" })
  if not lock then return failed(code, err) end
  local finished = 0
  local t1 = ngx.thread.spawn(function() local r = c:inspect(a.name) finished = finished + 1 return r end)
  local t2 = ngx.thread.spawn(function() local r = c:leader(a.name) finished = finished + 1 return r end)
  local yielded = finished == 0
  local _, info = ngx.thread.wait(t1)
  local _, leader = ngx.thread.wait(t2)
  local h = info.holders[1]
  assert(lock:release())
  local shared = assert(c:acquire(a.name, { kind = "shared" }))
  local none, _, lcode = c:leader(a.name)
  shared:release()
  ngx.say("yielded=", tostring(yielded), " holders=", #info.holders, " owner=", tostring(h.owner),
    " value=", tostring(h.value), " same_term=", tostring(leader.fencing_token == lock:fencing_token()),
    " leader_value=", tostring(leader.value), " shared_leader=", tostring(none), ",", tostring(lcode))
end

-- Yields until pred() is true, at most 5 s; whether it became true.
local function until_true(pred)
  ngx.update_time()
  local deadline = ngx.now() + 5
  while not pred() do
    ngx.update_time()
    if ngx.now() > deadline then return false end
    ngx.sleep(0.005)
  end
  return true
end

-- client:break_lock in a worker (with the mode's client; the holder is the yielding one, with
-- heartbeats): a blocking call with either client (the library has no queued break); the holder
-- hears it at its next renewal, through the worker's timer, with the cause "broken" and the
-- reason; without now the name stays closed (inspect: no holder, closed_ms > 0), with now=1 it
-- is free at once and taken with a greater token.
function M.break_lock()
  local a, c = args()
  local cause
  local lock, err, code = clients.yield:acquire(a.name, { lease_ms = 1000, heartbeat_ms = 250,
    owner = "holder-7", on_lost = function(l) cause = l:lost_cause() end })
  if not lock then return failed(code, err) end
  local token = lock:fencing_token()
  local info, berr, bcode = c:break_lock(a.name, "maintenance window", a.now == "1")
  if not info then return failed(bcode, berr) end
  local h = info.holders[1]
  local seen = assert(c:inspect(a.name))
  local heard = until_true(function() return cause ~= nil end)
  local taken = c:acquire(a.name, { wait_ms = 0 })
  ngx.say("holders=", #info.holders, " owner=", tostring(h and h.owner),
    " same_token=", tostring(h ~= nil and h.fencing_token == token),
    " closed=", tostring(info.closed_ms > 0), ",", info.closed_by,
    " inspect=", #seen.holders, ",", tostring(seen.closed_ms > 0), ",", seen.closed_by,
    " heard=", tostring(heard), " cause=", tostring(cause ~= nil and cause:find("^broken") ~= nil
      and cause:find("maintenance window", 1, true) ~= nil),
    " taken=", tostring(taken ~= nil and taken:fencing_token() > token))
  if taken then taken:release() end
  lock:release()
end

-- client:request_release in a worker: the holder (the mode's client) acquired with
-- on_release_requested hears the reason through the worker's queue, in a timer light thread,
-- and releases there. Its subscription is live a round trip after its acquire: the other client
-- asks every 150 ms until it is heard (at most 5 s). Then the name is free, and asking is false.
function M.ask()
  local a, c = args()
  local other = a.mode == "block" and clients.yield or clients.block
  local reason, phase_seen, released
  local lock, err, code = c:acquire(a.name, { on_release_requested = function(l, why)
    reason, phase_seen = why, ngx.get_phase()
    released = l:release()
  end })
  if not lock then return failed(code, err) end
  local asked = 0
  local heard = until_true(function()
    if released ~= nil then return true end
    asked = asked + 1
    assert(other:request_release(a.name, "deploy #42") == true)
    ngx.sleep(0.15)
    return released ~= nil
  end)
  local again = other:request_release(a.name, "again")
  ngx.say("heard=", tostring(heard), " reason=", tostring(reason), " phase=", tostring(phase_seen),
    " released=", tostring(released), " free=", tostring(#assert(other:inspect(a.name)).holders == 0),
    " again=", tostring(again))
end

local function shown(leader)
  if leader == nil then return "timeout" end
  if leader == false then return "nobody" end
  return "value:" .. leader.value
end

-- Observing in a worker (with the mode's client; the campaigns use the yielding one): fn runs
-- in a timer light thread and may yield, one report at a time, in order: first nobody, then the
-- campaign's term and value, the proclaim, the resignation; after cancel, nothing more (the
-- request waits 1.2 s after a new campaign).
function M.observe()
  local a, c = args()
  local name = a.name
  local seen, phases = {}, {}
  local ob = assert(c:observe(name, function(leader)
    ngx.sleep(0.001)  -- fn may yield: the next report waits for it
    seen[#seen + 1] = leader or false
    phases[ngx.get_phase()] = true
  end))
  local function next_report()
    if not until_true(function() return #seen > 0 end) then return nil end
    return table.remove(seen, 1)
  end
  local out = {}
  out[#out + 1] = "first=" .. shown(next_report())
  local leadership = assert(clients.yield:campaign(name, { value = "v1" }))
  local r = next_report()
  out[#out + 1] = "campaign=" .. (r and r.fencing_token == leadership:fencing_token() and shown(r)
    or shown(r) .. ",term:" .. tostring(r and r.fencing_token))
  assert(leadership:set_value("v2"))
  r = next_report()
  out[#out + 1] = "proclaim=" .. (r and r.fencing_token == leadership:fencing_token() and shown(r)
    or shown(r) .. ",term:" .. tostring(r and r.fencing_token))
  assert(leadership:release())
  out[#out + 1] = "resign=" .. shown(next_report())
  out[#out + 1] = "extra=" .. #seen
  assert(ob:cancel() and ob:cancel())
  local again = assert(clients.yield:campaign(name, { value = "v3" }))
  ngx.sleep(1.2)
  out[#out + 1] = "after_cancel=" .. #seen
  assert(again:release())
  local ph = {}
  for k in pairs(phases) do ph[#ph + 1] = k end
  out[#out + 1] = "phase=" .. table.concat(ph, ",")
  ngx.say(table.concat(out, " "))
end

-- The observer init_worker started: it follows a campaign made here.
function M.observe_init()
  local name = "init-observed-" .. ngx.worker.pid()
  local out = {}
  local function step(label, want)
    local ok = until_true(function() return current == want end)
    out[#out + 1] = label .. "=" .. (ok and want or ("'" .. current .. "'"))
  end
  step("first", "nobody")
  local leadership = assert(clients.yield:campaign(name, { value = "leader-from-request" }))
  step("campaign", "leader-from-request")
  assert(leadership:release())
  step("resign", "nobody")
  ngx.say(table.concat(out, " "))
end

-- client:acquire_many in a worker (with the mode's client; the holder of /b is the yielding
-- one): all or none while /b is held (the message names it, /a was given back), a bounded wait,
-- a wait that ends when the holder lets go in a light thread of its own (which runs only if the
-- waiter yields: with the block client it runs after the wait ran out), each lock its own token,
-- a group release naming the lost lock alone, a name given twice, nothing left held.
function M.many()
  local a, c = args()
  local na, nb, nc = a.name .. "/a", a.name .. "/b", a.name .. "/c"
  local held = assert(clients.yield:acquire(nb, { lease_ms = 10000 }))
  local out = {}
  local function say(k, ...) out[#out + 1] = k .. "=" .. table.concat({ ... }, ",") end
  local g, err, code = c:acquire_many({ nc, nb, na }, { wait_ms = 0 })
  say("none", tostring(code), tostring(g == nil and err:find(nb, 1, true) ~= nil),
    tostring(#assert(c:inspect(na)).holders == 0))
  ngx.update_time()
  local t0 = ngx.now()
  g, err, code = c:acquire_many({ nc, nb, na }, { wait_ms = 300 })
  ngx.update_time()
  say("bounded", tostring(code), tostring(g == nil and ngx.now() - t0 >= 0.25))
  local releaser = ngx.thread.spawn(function()
    ngx.sleep(0.2)
    return held:release()
  end)
  g = c:acquire_many({ nc, nb, na }, { wait_ms = 1500 })
  say("handed", tostring(g ~= nil))
  assert(ngx.thread.wait(releaser))
  if not g then g = assert(c:acquire_many({ nc, nb, na }, { wait_ms = 0 })) end
  local t1, t2, t3 = g[1]:fencing_token(), g[2]:fencing_token(), g[3]:fencing_token()
  say("tokens", #g, tostring(g[2].name == nb and t1 ~= t2 and t2 ~= t3 and t1 ~= t3),
    tostring(t2 > held:fencing_token()))
  assert(clients.block:break_lock(nb, "", true))
  local ok, rerr, rcode = g:release()
  say("lost", tostring(rcode), tostring(ok == nil and rerr:find(nb, 1, true) ~= nil),
    tostring(ok == nil and not rerr:find(na, 1, true) and not rerr:find(nc, 1, true)))
  g, err, code = c:acquire_many({ na, na })
  say("dup", tostring(code))
  local free = true
  for _, n in ipairs({ na, nb, nc }) do
    if #assert(c:inspect(n)).holders ~= 0 then free = false end
  end
  say("free", tostring(free))
  ngx.say(table.concat(out, " "))
end

-- Waits for name and name/x at once (without limit, the default, unless wait_ms is given); says
-- what it got.
function M.wait_many()
  local a, c = args()
  local g, err, code = c:acquire_many({ a.name, a.name .. "/x" }, { wait_ms = a.wait_ms and tonumber(a.wait_ms) })
  if not g then return failed(code, err) end
  local holder = state[a.name] or "none"
  local ok, rerr = g:release()
  ngx.say("locks=", #g, " token=", g[1]:fencing_token_string(), " holder=", holder,
    " release=", ok and "ok" or rerr)
end

-- A lock left to the GC: released late, without blocking.
local function forget(c, name) assert(c:acquire(name, { lease_ms = 0 })) end

function M.gc()
  local a, c = args()
  forget(c, a.name)
  collectgarbage()
  collectgarbage()
  ngx.say("collected")
end

return M
