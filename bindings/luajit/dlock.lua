-- dlock: distributed locks with fencing tokens and lease heartbeats (LuaJIT binding).
--
-- A thin LuaJIT FFI layer over libdlock.so; see README.md beside this file.
--
--   local dlock = require("dlock")
--   local client = assert(dlock.open("redis://127.0.0.1:6379"))
--   local lock, err = client:acquire("jobs/nightly", { lease_ms = 10000, wait_ms = 5000 })
--   if not lock then error(err) end
--   write(lock:fencing_token())      -- uint64_t cdata: exact, compares with < and ==
--   assert(lock:release())
--   client:close()
--
-- Conventions: failures the library reports come back as `nil, message, code` (code is the
-- status name without its prefix: "NOT_ACQUIRED", "NOT_HELD", "EINVAL", "EIO", "EBACKEND",
-- "EAUTH", ...); wrong argument types and out-of-range numbers raise a Lua error ("bad
-- argument"), like the standard library does. Handles are freed by the GC when forgotten
-- (a forgotten lock is released then; a forgotten client is closed).
--
-- The library runs heartbeats on its own thread. LuaJIT cannot run Lua code on another thread,
-- so on_lost is not called from there: it is called from client:poll() (and before every
-- acquire), on the caller's thread, once for each lock that stopped being valid without being
-- released. lock:valid() turns false at the same moment.

local ffi = require("ffi")

ffi.cdef [[
typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;
typedef struct dlock_options dlock_options;
typedef int dlock_status;
typedef void (*dlock_lost_fn)(const char *name, uint64_t fencing_token, void *arg);

const char *dlock_status_str(dlock_status s);
const char *dlock_last_error(void);
const char *dlock_version(void);
dlock_status dlock_client_open(const char *url, dlock_client **out);
void dlock_client_close(dlock_client *c);
dlock_options *dlock_options_new(void);
void dlock_options_free(dlock_options *o);
dlock_status dlock_options_set_lease_ms(dlock_options *o, uint64_t ms);
dlock_status dlock_options_set_heartbeat_ms(dlock_options *o, uint64_t ms);
dlock_status dlock_options_set_wait_ms(dlock_options *o, int64_t ms);
dlock_status dlock_options_set_retry_ms(dlock_options *o, uint64_t min_ms, uint64_t max_ms);
dlock_status dlock_options_set_owner(dlock_options *o, const char *owner);
dlock_status dlock_options_set_on_lost(dlock_options *o, dlock_lost_fn fn, void *arg);
dlock_status dlock_acquire(dlock_client *c, const char *name, const dlock_options *o,
                           dlock_lock **out);
dlock_status dlock_release(dlock_lock *l);
dlock_status dlock_extend(dlock_lock *l, uint64_t lease_ms);
uint64_t dlock_lock_fencing_token(const dlock_lock *l);
int dlock_lock_is_valid(const dlock_lock *l);
int64_t dlock_lock_remaining_ms(const dlock_lock *l);
uint32_t dlock_lock_attempts(const dlock_lock *l);
const char *dlock_lock_name(const dlock_lock *l);
]]

local M = { _VERSION = "0.1.0", MAX_NAME_BYTES = 1024, MAX_OWNER_BYTES = 256 }

-- ----- finding the library: $DLOCK_LIBRARY, pkg-config's libdir, the system loader -----------

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local function load_library()
  local env = os.getenv("DLOCK_LIBRARY")
  if env and env ~= "" then
    local ok, lib = pcall(ffi.load, env)
    if not ok then error("dlock: cannot load DLOCK_LIBRARY=" .. env .. ": " .. tostring(lib), 0) end
    return lib, env
  end
  local tried = {}
  local p = io.popen("pkg-config --variable=libdir dlock 2>/dev/null")
  if p then
    local libdir = (p:read("*l") or ""):gsub("%s+$", "")
    p:close()
    if libdir ~= "" then
      for _, name in ipairs({ "libdlock.so.0", "libdlock.so" }) do
        local path = libdir .. "/" .. name
        if file_exists(path) then
          local ok, lib = pcall(ffi.load, path)
          if ok then return lib, path end
          tried[#tried + 1] = path .. ": " .. tostring(lib)
        end
      end
    end
  end
  local ok, lib = pcall(ffi.load, "libdlock.so.0")
  if ok then return lib, "libdlock.so.0" end
  tried[#tried + 1] = "libdlock.so.0: " .. tostring(lib)
  error("dlock: cannot load libdlock.so; set DLOCK_LIBRARY to its path, or install it where "
    .. "pkg-config or the loader finds it. Tried: " .. table.concat(tried, "; "), 0)
end

local C, library_path = load_library()
M.library_path = library_path

local version = ffi.string(C.dlock_version())
if not version:match("^0%.") then
  error("dlock: " .. library_path .. " is libdlock " .. version .. "; this binding needs 0.x", 0)
end

local INT64_MAX = 9223372036854775807LL

local status_codes = { [0] = "OK", "NOT_ACQUIRED", "NOT_HELD", "EINVAL", "EIO", "EBACKEND",
  "EAUTH", "ECANCELLED", "ENOMEM", "EINTERNAL" }
M.status = {}
for n, name in pairs(status_codes) do M.status[name] = n end

function M.version() return ffi.string(C.dlock_version()) end

-- "NOT_HELD" for 2; unknown numbers give "UNKNOWN".
function M.code(status)
  return (ffi.string(C.dlock_status_str(status)):gsub("^DLOCK_", ""))
end

-- nil, message, code for a failed call (read on the calling thread, right after the call).
local function fail(status)
  local msg = ffi.string(C.dlock_last_error())
  local code = M.code(status)
  if msg == "" then msg = "DLOCK_" .. code end
  return nil, msg, code
end
M._fail = fail  -- for the tests

-- ----- argument checks: Lua errors for wrong types, like the standard library ------------------

local function argerror(n, fname, msg)
  error(string.format("bad argument #%d to '%s' (%s)", n, fname, msg), 3)
end

local function check_string(v, n, fname, what)
  if type(v) ~= "string" then
    argerror(n, fname, (what or "string") .. " expected, got " .. type(v))
  end
  if v:find("\0", 1, true) then argerror(n, fname, (what or "string") .. " contains a NUL byte") end
  return v
end

-- An integer number of milliseconds in lo..hi (Lua numbers, exact up to 2^53), or a 64-bit
-- cdata integer (passed through; the library checks its range).
local function check_ms(v, n, fname, field, lo, hi)
  local t = type(v)
  if t == "number" then
    if v ~= v or v % 1 ~= 0 or v == math.huge or v == -math.huge then
      argerror(n, fname, field .. " must be an integer number of milliseconds")
    end
    if v < lo or v > hi then
      argerror(n, fname, string.format("%s %s is out of range (%d..%s)", field,
        tostring(v), lo, tostring(hi)))
    end
    return v
  elseif t == "cdata" and (ffi.istype("int64_t", v) or ffi.istype("uint64_t", v)) then
    if ffi.istype("int64_t", v) and v < lo then
      argerror(n, fname, field .. " " .. tostring(v) .. " is out of range")
    end
    return v
  end
  argerror(n, fname, field .. " must be a number, got " .. t)
end

-- ----- clients ---------------------------------------------------------------------------------

local Client = {}
Client.__index = Client
local Lock = {}
Lock.__index = Lock

-- Opens a client (redis://[[user]:password@]host[:port][/db][?params] or redis+unix://...).
-- Returns the client, or nil, message, code ("EINVAL", "EIO", "EAUTH", ...).
function M.open(url)
  check_string(url, 1, "open", "string")
  local out = ffi.new("dlock_client *[1]")
  local s = C.dlock_client_open(url, out)
  if s ~= 0 then return fail(s) end
  local self = setmetatable({
    _h = ffi.gc(out[0], C.dlock_client_close),
    _watched = setmetatable({}, { __mode = "k" }),  -- locks with on_lost -> true
  }, Client)
  return self
end

-- Releases every lock the client still holds, closes its connections, stops its thread.
-- Locks still referenced stay safe: their release() then returns nil, msg, "NOT_HELD".
function Client:close()
  local h = self._h
  if h == nil then return true end
  self._h = nil
  ffi.gc(h, nil)
  C.dlock_client_close(h)
  return true
end

function Client:closed() return self._h == nil end

function Client:__tostring()
  return "dlock.client(" .. (self._h and "open" or "closed") .. ")"
end

local function build_options(opts)
  if opts == nil then return nil, nil end
  if type(opts) ~= "table" then argerror(2, "acquire", "table expected, got " .. type(opts)) end
  local lease = opts.lease_ms and check_ms(opts.lease_ms, 2, "acquire", "lease_ms", 0, 2^53)
  local wait = opts.wait_ms and check_ms(opts.wait_ms, 2, "acquire", "wait_ms", -1, 2^53)
  local hb = opts.heartbeat_ms and check_ms(opts.heartbeat_ms, 2, "acquire", "heartbeat_ms", 0, 2^53)
  local rmin, rmax
  if opts.retry_ms ~= nil then
    if type(opts.retry_ms) ~= "table" then
      argerror(2, "acquire", "retry_ms must be a { min_ms, max_ms } table")
    end
    rmin = check_ms(opts.retry_ms[1], 2, "acquire", "retry_ms[1]", 0, 2^53)
    rmax = check_ms(opts.retry_ms[2], 2, "acquire", "retry_ms[2]", 0, 2^53)
  end
  if opts.owner ~= nil then check_string(opts.owner, 2, "acquire", "owner") end
  local on_lost = opts.on_lost
  if on_lost ~= nil and type(on_lost) ~= "function" then
    local mt = getmetatable(on_lost)
    if not (mt and mt.__call) then argerror(2, "acquire", "on_lost must be a function") end
  end
  for k in pairs(opts) do
    if k ~= "lease_ms" and k ~= "wait_ms" and k ~= "heartbeat_ms" and k ~= "retry_ms"
      and k ~= "owner" and k ~= "on_lost" then
      argerror(2, "acquire", "unknown option '" .. tostring(k) .. "'")
    end
  end
  local o = C.dlock_options_new()
  if o == nil then error("dlock: out of memory", 2) end
  o = ffi.gc(o, C.dlock_options_free)
  local s = 0
  if lease then s = C.dlock_options_set_lease_ms(o, lease) end
  if s == 0 and hb then s = C.dlock_options_set_heartbeat_ms(o, hb) end
  if s == 0 and wait then s = C.dlock_options_set_wait_ms(o, wait) end
  if s == 0 and rmin then s = C.dlock_options_set_retry_ms(o, rmin, rmax) end
  if s == 0 and opts.owner then s = C.dlock_options_set_owner(o, opts.owner) end
  if s ~= 0 then
    local _, msg, code = fail(s)
    C.dlock_options_free(ffi.gc(o, nil))
    return false, msg, code
  end
  return o, on_lost
end

-- Acquires the lock called name (1..1024 bytes; any bytes but NUL). opts (all optional):
--   lease_ms (default 10000; 0 = no expiry), wait_ms (0 = one try, default; N ms; -1 = no
--   limit), heartbeat_ms (default lease/3; 0 = none), retry_ms = { min, max } (default
--   {50, 1000}), owner (a label), on_lost = function(lock) (see the note at the top).
-- Returns the lock, or nil, message, code: "NOT_ACQUIRED" when someone else holds it and the
-- wait ran out; "EINVAL" for values the library refuses (a name over 1024 bytes, ...).
function Client:acquire(name, opts)
  if getmetatable(self) ~= Client then error("dlock: call it as client:acquire(name, opts)", 2) end
  check_string(name, 1, "acquire", "string")
  self:poll()
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local o, on_lost, code = build_options(opts)
  if o == false then return nil, on_lost, code end
  local out = ffi.new("dlock_lock *[1]")
  local s = C.dlock_acquire(h, name, o, out)
  if o ~= nil then C.dlock_options_free(ffi.gc(o, nil)) end
  if s ~= 0 then return fail(s) end
  local l = out[0]
  local lock = setmetatable({
    _h = ffi.gc(l, C.dlock_release),
    _client = self,
    _on_lost = on_lost,
    _token = C.dlock_lock_fencing_token(l),
    name = name,
  }, Lock)
  if on_lost then self._watched[lock] = true end
  return lock
end

-- Calls on_lost(lock) for every lock of this client that stopped being valid (found lost by a
-- heartbeat, taken over, or past its local deadline) without being released. Each at most
-- once. Returns how many it called. Cheap: call it from a timer (e.g. ngx.timer.every).
function Client:poll()
  local n = 0
  local lost
  for lock in pairs(self._watched) do
    local h = lock._h
    if h == nil then
      self._watched[lock] = nil
    elseif C.dlock_lock_is_valid(h) == 0 then
      lost = lost or {}
      lost[#lost + 1] = lock
    end
  end
  if lost then
    for _, lock in ipairs(lost) do
      self._watched[lock] = nil
      n = n + 1
      local ok, err = pcall(lock._on_lost, lock)
      if not ok then io.stderr:write("dlock: error in on_lost callback (ignored): ", tostring(err), "\n") end
    end
  end
  return n
end

-- ----- locks -----------------------------------------------------------------------------------

-- The fencing token (uint64_t cdata: exact; compare with <, ==; tostring() ends in "ULL").
function Lock:fencing_token() return self._token end

-- The fencing token as a decimal string.
function Lock:fencing_token_string() return (tostring(self._token):gsub("ULL$", "")) end

-- true while the local deadline holds and the lock was not found lost.
function Lock:valid()
  local h = self._h
  return h ~= nil and C.dlock_lock_is_valid(h) == 1
end

-- Milliseconds before the local deadline; math.huge for no expiry; 0 once lost or released.
function Lock:remaining_ms()
  local h = self._h
  if h == nil then return 0 end
  local left = C.dlock_lock_remaining_ms(h)
  if left == INT64_MAX then return math.huge end
  return tonumber(left)
end

function Lock:attempts()
  local h = self._h
  return h ~= nil and C.dlock_lock_attempts(h) or 0
end

function Lock:released() return self._h == nil end

-- Sets the lease to lease_ms from now (0 = no expiry). true, or nil, message, code
-- ("NOT_HELD" when it was lost or released).
function Lock:extend(lease_ms)
  check_ms(lease_ms, 1, "extend", "lease_ms", 0, 2^53)
  local h = self._h
  if h == nil then return nil, "lock '" .. self.name .. "' was already released", "NOT_HELD" end
  local s = C.dlock_extend(h, lease_ms)
  if s ~= 0 then return fail(s) end
  return true
end

-- Releases the lock: true, or nil, message, code ("NOT_HELD" when it had been lost or was
-- already released). The handle is gone either way.
function Lock:release()
  local h = self._h
  if h == nil then return nil, "lock '" .. self.name .. "' was already released", "NOT_HELD" end
  self._h = nil
  ffi.gc(h, nil)
  local s = C.dlock_release(h)
  if s ~= 0 then return fail(s) end
  return true
end

function Lock:__tostring()
  local state = self._h == nil and "released" or (self:valid() and "held" or "lost")
  return string.format("dlock.lock(%q, token=%s, %s)", self.name, self:fencing_token_string(), state)
end

M.Client, M.Lock = Client, Lock
return M
