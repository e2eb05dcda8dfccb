-- dlock: distributed locks with fencing tokens and lease heartbeats (LuaJIT binding).
--
-- A thin LuaJIT FFI layer over libdlock.so; see README.md beside this file.
--
--   local dlock = require("dlock")
--   local client = assert(dlock.open("redis://127.0.0.1:6379"))
--   local lock, err = client:acquire("jobs/nightly", { lease_ms = 10000, wait_ms = 5000 })
--   if not lock then error(err) end
--   print(lock:fencing_token_string()) -- exact decimal; lock:fencing_token() is uint64_t cdata
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
local bit = require("bit")

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
typedef struct dlock_info dlock_info;
dlock_status dlock_options_set_kind(dlock_options *o, int kind);
dlock_status dlock_options_set_permits(dlock_options *o, uint32_t n);
dlock_status dlock_options_set_fair(dlock_options *o, int fair);
uint32_t dlock_client_capabilities(const dlock_client *c);
dlock_status dlock_inspect(dlock_client *c, const char *name, dlock_info **out);
void dlock_info_free(dlock_info *i);
uint32_t dlock_info_holders(const dlock_info *i);
const char *dlock_info_owner(const dlock_info *i, uint32_t k);
int64_t dlock_info_remaining_ms(const dlock_info *i, uint32_t k);
uint64_t dlock_info_fencing_token(const dlock_info *i, uint32_t k);
int dlock_info_kind(const dlock_info *i);
uint32_t dlock_info_permits(const dlock_info *i);
uint64_t dlock_limit_value(int which);
size_t dlock_url_redact(const char *url, char *buf, size_t len);
]]
ffi.cdef [[ char *getcwd(char *buf, size_t size); ]]  -- redeclaring it elsewhere is harmless

local M = { _VERSION = "0.1.0" }

-- ----- finding the library: $DLOCK_LIBRARY, pkg-config's libdir, the system loader -----------

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- A relative $DLOCK_LIBRARY is a path from the current directory (dlopen would search the
-- loader path for a bare "libdlock.so"): made absolute now, so that library_path stays right
-- whatever changes directory later.
local function absolute(path)
  if path:sub(1, 1) == "/" or not file_exists(path) then return path end
  local buf = ffi.new("char[?]", 4096)
  if ffi.C.getcwd(buf, 4096) == nil then return path end
  local cwd = ffi.string(buf)
  path = path:gsub("^%./", "")
  return (cwd == "/" and "" or cwd) .. "/" .. path
end

local function load_library()
  local env = os.getenv("DLOCK_LIBRARY")
  if env and env ~= "" then
    env = absolute(env)
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

-- The library's limits (dlock_limit_value): the longest lock name and owner label, in bytes.
M.MAX_NAME_BYTES = tonumber(C.dlock_limit_value(0))   -- DLOCK_LIMIT_NAME_BYTES
M.MAX_OWNER_BYTES = tonumber(C.dlock_limit_value(1))  -- DLOCK_LIMIT_OWNER_BYTES

-- dlock_kind and the capability bits of dlock_client_capabilities, by the names this binding
-- gives them (the library has numbers only).
local KINDS = { [0] = "exclusive", "shared" }
local KIND_NUMBERS = { exclusive = 0, shared = 1 }
local CAPABILITIES = { fencing_strict = 0x1, notifies = 0x2, shared = 0x4, permits = 0x8, fair = 0x10 }

function M.version() return ffi.string(C.dlock_version()) end

-- ----- argument checks: Lua errors for wrong types, like the standard library ------------------

-- Raises msg at the innermost caller outside this file, so that the message names the user's
-- file and line (however deep in this file's helpers the check is), as error(msg, 2) would.
local THIS_FILE = debug.getinfo(1, "S").source
local function raise(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if info == nil then level = 2 break end
    if info.source ~= THIS_FILE then break end
    level = level + 1
  end
  error(msg, level)
end

local function argerror(n, fname, msg)
  raise(string.format("bad argument #%d to '%s' (%s)", n, fname, msg))
end

-- An integer (Lua number or 64-bit cdata) in decimal, never as 9.007199254741e+15 or 5ULL.
local function int_string(v)
  if type(v) == "number" then
    if v % 1 == 0 and v > -2^63 and v < 2^63 then return string.format("%.0f", v) end
    return tostring(v)
  end
  return (tostring(v):gsub("U?LL$", ""))
end

-- "NOT_HELD" for 2: the library's name for it without "DLOCK_" (dlock_status_str); unknown
-- numbers give "UNKNOWN".
function M.code(status)
  if type(status) ~= "number" and not (type(status) == "cdata" and ffi.istype("int64_t", status)) then
    argerror(1, "code", "number expected, got " .. type(status))
  end
  return (ffi.string(C.dlock_status_str(status)):gsub("^DLOCK_", ""))
end

-- Status numbers by code, for every number the library names (they run from 0 without gaps).
M.status = {}
do
  local n = 0
  while M.code(n) ~= "UNKNOWN" do
    M.status[M.code(n)] = n
    n = n + 1
  end
end

-- url as the library shows it: any password replaced by "***" (dlock_url_redact).
local function url_shown(url)
  local n = tonumber(C.dlock_url_redact(url, nil, 0))
  local buf = ffi.new("char[?]", n + 1)
  C.dlock_url_redact(url, buf, n + 1)
  return ffi.string(buf, n)
end

-- nil, message, code for a failed call (read on the calling thread, right after the call).
local function fail(status)
  local msg = ffi.string(C.dlock_last_error())
  local code = M.code(status)
  if msg == "" then msg = "DLOCK_" .. code end
  return nil, msg, code
end
M._fail = fail  -- for the tests

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
      argerror(n, fname, string.format("%s %s is out of range (%s..%s)", field,
        int_string(v), int_string(lo), int_string(hi)))
    end
    return v
  elseif t == "cdata" and (ffi.istype("int64_t", v) or ffi.istype("uint64_t", v)) then
    if ffi.istype("int64_t", v) and v < lo then
      argerror(n, fname, field .. " " .. int_string(v) .. " is out of range")
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
    _url = url_shown(url),
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
  return "dlock.client(" .. self._url .. ", " .. (self._h and "open" or "closed") .. ")"
end

-- What the client's backend offers: a table of booleans { fencing_strict, notifies, shared,
-- permits } (dlock_client_capabilities); nil, message, "EINVAL" once closed.
function Client:capabilities()
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local bits = C.dlock_client_capabilities(h)
  local caps = {}
  for name, mask in pairs(CAPABILITIES) do caps[name] = bit.band(bits, mask) ~= 0 end
  return caps
end

-- Who holds the lock called name now: { kind = "exclusive" | "shared", holders = { { owner,
-- remaining_ms, fencing_token }, ... }, permits = n } (holders empty when free; owner nil when
-- the holder set none, remaining_ms nil for no expiry, fencing_token uint64_t cdata or nil when
-- unknown; permits the semaphore's size, 0 for a lock or a free name), or nil, message, code.
-- A snapshot read from the server, stale as soon as it returns: never decide from it whether to
-- take the lock. Owner tokens are never shown, only the labels.
function Client:inspect(name)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:inspect(name)") end
  check_string(name, 1, "inspect", "string")
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local out = ffi.new("dlock_info *[1]")
  local s = C.dlock_inspect(h, name, out)
  if s ~= 0 then return fail(s) end
  local info = ffi.gc(out[0], C.dlock_info_free)
  local holders = {}
  for k = 0, C.dlock_info_holders(info) - 1 do
    local owner = ffi.string(C.dlock_info_owner(info, k))
    local left = C.dlock_info_remaining_ms(info, k)
    local token = C.dlock_info_fencing_token(info, k)
    holders[#holders + 1] = {
      owner = owner ~= "" and owner or nil,
      remaining_ms = left >= 0 and tonumber(left) or nil,
      fencing_token = token ~= 0 and token or nil,
    }
  end
  local kind = C.dlock_info_kind(info)
  local permits = tonumber(C.dlock_info_permits(info))
  C.dlock_info_free(ffi.gc(info, nil))
  return { kind = KINDS[kind] or kind, holders = holders, permits = permits }
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
  if opts.kind ~= nil and KIND_NUMBERS[opts.kind] == nil then
    argerror(2, "acquire", "kind must be \"exclusive\" or \"shared\"")
  end
  -- shared = true is kind = "shared", shared = false kind = "exclusive"; saying both, they must agree.
  local kind = opts.kind
  if opts.shared ~= nil then
    if type(opts.shared) ~= "boolean" then
      argerror(2, "acquire", "shared must be a boolean, got " .. type(opts.shared))
    end
    local said = opts.shared and "shared" or "exclusive"
    if kind ~= nil and kind ~= said then
      argerror(2, "acquire", "shared = " .. tostring(opts.shared) .. " contradicts kind = \""
        .. kind .. "\" (give one of them)")
    end
    kind = said
  end
  local permits = opts.permits
  if permits ~= nil and (type(permits) ~= "number" or permits % 1 ~= 0 or permits < 0
    or permits > 2^32 - 1) then
    argerror(2, "acquire", "permits must be an integer from 0 to 4294967295")
  end
  if opts.fair ~= nil and type(opts.fair) ~= "boolean" then
    argerror(2, "acquire", "fair must be a boolean, got " .. type(opts.fair))
  end
  local on_lost = opts.on_lost
  if on_lost ~= nil and type(on_lost) ~= "function" then
    local mt = getmetatable(on_lost)
    if not (mt and mt.__call) then argerror(2, "acquire", "on_lost must be a function") end
  end
  for k in pairs(opts) do
    if k ~= "lease_ms" and k ~= "wait_ms" and k ~= "heartbeat_ms" and k ~= "retry_ms"
      and k ~= "owner" and k ~= "on_lost" and k ~= "kind" and k ~= "shared" and k ~= "permits"
      and k ~= "fair" then
      argerror(2, "acquire", "unknown option '" .. tostring(k) .. "'")
    end
  end
  local o = C.dlock_options_new()
  if o == nil then raise("dlock: out of memory") end
  o = ffi.gc(o, C.dlock_options_free)
  local s = 0
  if lease then s = C.dlock_options_set_lease_ms(o, lease) end
  if s == 0 and hb then s = C.dlock_options_set_heartbeat_ms(o, hb) end
  if s == 0 and wait then s = C.dlock_options_set_wait_ms(o, wait) end
  if s == 0 and rmin then s = C.dlock_options_set_retry_ms(o, rmin, rmax) end
  if s == 0 and opts.owner then s = C.dlock_options_set_owner(o, opts.owner) end
  if s == 0 and kind then s = C.dlock_options_set_kind(o, KIND_NUMBERS[kind]) end
  if s == 0 and permits then s = C.dlock_options_set_permits(o, permits) end
  if s == 0 and opts.fair ~= nil then s = C.dlock_options_set_fair(o, opts.fair and 1 or 0) end
  if s ~= 0 then
    local _, msg, code = fail(s)
    C.dlock_options_free(ffi.gc(o, nil))
    return false, msg, code
  end
  return o, on_lost
end

-- Acquires the lock called name (1..MAX_NAME_BYTES bytes; any bytes but NUL). opts (all
--   optional): lease_ms (default 10000; 0 = no expiry), wait_ms (0 = one try, default; N ms;
--   -1 = no limit), heartbeat_ms (default lease/3; 0 = none), retry_ms = { min, max } (default
--   {50, 1000}), owner (a label), on_lost = function(lock) (see the note at the top), kind =
--   "exclusive" (default) or "shared" (shared = true says the same), permits = n (a semaphore
--   of n holders; 0 = off): the library refuses kinds the backend does not offer, a shared
--   semaphore, and another n (or a lock kind) than the name's holders have, with "EINVAL";
--   fair = true (default: a waiting exclusive acquire takes a place in line and a release hands
--   it the lock, in arrival order, where the backend has the "fair" capability) or false (it
--   competes with every other waiter at each release).
-- Returns the lock, or nil, message, code: "NOT_ACQUIRED" when someone else holds it and the
-- wait ran out; "EINVAL" for values the library refuses (a name over 1024 bytes, ...).
function Client:acquire(name, opts)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:acquire(name, opts)") end
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

-- ----- fencing tokens --------------------------------------------------------------------------
--
-- Tokens are uint64_t cdata: exact, and they compare with <, <=, == against each other and
-- against Lua numbers. A Lua number is a double, exact only up to 2^53, and Redis tokens are
-- already ~1.7e15 (server time in microseconds), so never tonumber() a token: print it with
-- lock:fencing_token_string() (or string.format("%d", token)), store it as that string, and
-- read it back with dlock.token(string). print(token) and tostring(token) show LuaJIT's exact
-- "1700000000000000ULL".

local UINT64_MAX_DIV10 = 1844674407370955161ULL

-- A fencing token as uint64_t cdata from a decimal string ("1700000000000000"), a 64-bit
-- integer cdata, or a non-negative integer Lua number up to 2^53. Raises "bad argument" for
-- anything else, including numbers above 2^53 (they may already have lost digits).
function M.token(v)
  local t = type(v)
  if t == "string" then
    if not v:match("^%d+$") then argerror(1, "token", "decimal digits expected, got '" .. v .. "'") end
    local n = 0ULL
    for i = 1, #v do
      local d = v:byte(i) - 48
      if n > UINT64_MAX_DIV10 or (n == UINT64_MAX_DIV10 and d > 5) then
        argerror(1, "token", "'" .. v .. "' is above 18446744073709551615")
      end
      n = n * 10 + d
    end
    return n
  elseif t == "number" then
    if v ~= v or v % 1 ~= 0 or v < 0 or v > 2^53 then
      argerror(1, "token", int_string(v) .. " is not an integer in 0..2^53; pass a decimal string")
    end
    return ffi.new("uint64_t", v)
  elseif t == "cdata" and ffi.istype("uint64_t", v) then
    return v
  elseif t == "cdata" and ffi.istype("int64_t", v) then
    if v < 0 then argerror(1, "token", int_string(v) .. " is negative") end
    return ffi.new("uint64_t", v)
  end
  argerror(1, "token", "string expected, got " .. t)
end

-- ----- locks -----------------------------------------------------------------------------------

-- The fencing token: uint64_t cdata (see above).
function Lock:fencing_token() return self._token end

-- The fencing token as an exact decimal string.
function Lock:fencing_token_string() return int_string(self._token) end

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
  if getmetatable(self) ~= Lock then raise("dlock: call it as lock:extend(lease_ms)") end
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
