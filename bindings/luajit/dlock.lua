-- dlock: distributed locks with fencing tokens and lease heartbeats (LuaJIT binding).
--
-- A thin LuaJIT FFI layer over libdlock.so; see README.md beside this file.
--
--   local dlock = require("dlock")
--   local client = assert(dlock.open("redis://127.0.0.1:6379"))
--   -- waits until it is free (no limit unless wait_ms says; wait_ms = 0 makes one try)
--   local lock, err = client:acquire("jobs/nightly", { lease_ms = 10000, wait_ms = 5000 })
--   if not lock then error(err) end
--   print(lock:fencing_token_string()) -- exact decimal; lock:fencing_token() is uint64_t cdata
--   assert(lock:release())
--   -- leader election: waits until this candidate leads; the token is the term
--   local leadership = assert(client:campaign("services/api", { value = "10.0.0.7:8080" }))
--   print(client:leader("services/api").value)  -- "10.0.0.7:8080", from any client
--   assert(leadership:release())                 -- resign
--   -- who leads, now and at each change (nil: nobody); outside nginx, delivered by dispatch
--   local observer = assert(client:observe("services/api", function(leader) print(leader) end))
--   client:dispatch(1000)                        -- waits up to 1 s for reports, delivers them
--   observer:cancel()
--   client:close()
--
-- Conventions: failures the library reports come back as `nil, message, code` (code is the
-- status name without its prefix: "NOT_ACQUIRED", "NOT_HELD", "EINVAL", "EIO", "EBACKEND",
-- "EAUTH", ...); wrong argument types and out-of-range numbers raise a Lua error ("bad
-- argument"), like the standard library does.
--
-- Two ways to wait. Outside nginx, acquire, extend, release and set_value are the library's
-- blocking calls.
-- Under ngx_lua (OpenResty, or nginx with the lua module), a client opened in a worker
-- (init_worker_by_lua*, never in the master) routes them through the library's _queued calls:
-- the request's light thread waits on an ngx.semaphore and yields, so the worker keeps serving
-- other requests. One dlock_queue per worker collects the outcomes; a per-worker
-- ngx.timer.every drains it (dlock_queue_pop never blocks), posts the semaphores, and delivers
-- lost-lock reports; while calls are in flight, a timer light thread drains it every
-- millisecond as well. dlock.open(url, { blocking = true }) keeps the blocking calls in nginx.
--
-- The library runs heartbeats on its own thread. LuaJIT cannot run Lua code on another thread,
-- so on_lost is not called from there: it is called from client:poll() (and before every
-- acquire; under nginx, by the worker's timer), on the caller's thread, once for each lock that
-- stopped being valid without being released. lock:valid() turns false at the same moment.
-- Observers (client:observe) are the library's queued ones for the same reason: their reports
-- wait in a completion queue until client:dispatch or client:poll delivers them (under nginx,
-- until the worker's timer does, to a light thread per observer).
--
-- Finalizers do no I/O. A lock left to the GC is released late: its finalizer only starts the
-- release (dlock_release_async, no waiting), when the GC gets to it. A client left to the GC is
-- closed later still: its finalizer only queues it, and it is closed (a blocking call) at the
-- next dlock.open, client:acquire or client:poll in that process (in nginx, by the worker's
-- timer). Release and close them yourself.

local has_ffi, ffi = pcall(require, "ffi")
if not has_ffi then
  error("dlock: this module needs LuaJIT (plain, or OpenResty's): it calls libdlock through "
    .. "LuaJIT's FFI, which " .. _VERSION .. " lacks", 0)
end
local bit = require("bit")

ffi.cdef [[
typedef struct dlock_client dlock_client;
typedef struct dlock_lock dlock_lock;
typedef struct dlock_options dlock_options;
typedef int dlock_status;
typedef void (*dlock_lost_fn)(const char *name, uint64_t fencing_token, void *arg);
typedef void (*dlock_done_fn)(dlock_status s, void *arg);
typedef struct dlock_queue dlock_queue;

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
const char *dlock_lock_lost_cause(const dlock_lock *l);
dlock_status dlock_client_metrics_text(dlock_client *c, char *buf, size_t len, size_t *needed);
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
dlock_status dlock_release_async(dlock_lock *l, dlock_done_fn done, void *arg);
dlock_status dlock_queue_new(dlock_queue **out);
int dlock_queue_pop(dlock_queue *q, uint64_t *tag, dlock_status *status, dlock_lock **lock);
dlock_status dlock_acquire_queued(dlock_client *c, const char *name, const dlock_options *o,
                                  dlock_queue *q, uint64_t tag);
dlock_status dlock_acquire_cancel_queued(dlock_client *c, dlock_queue *q, uint64_t tag);
dlock_status dlock_release_queued(dlock_lock *l, dlock_queue *q, uint64_t tag);
dlock_status dlock_extend_queued(dlock_lock *l, uint64_t lease_ms, dlock_queue *q, uint64_t tag);
dlock_status dlock_options_set_on_lost_queued(dlock_options *o, dlock_queue *q, uint64_t tag);
dlock_status dlock_options_set_value(dlock_options *o, const void *data, size_t len);
dlock_status dlock_lock_set_value(dlock_lock *l, const void *data, size_t len);
dlock_status dlock_lock_set_value_queued(dlock_lock *l, const void *data, size_t len, dlock_queue *q,
                                         uint64_t tag);
const void *dlock_info_value(const dlock_info *i, uint32_t k, size_t *len);
dlock_status dlock_campaign(dlock_client *c, const char *name, const dlock_options *o,
                            dlock_lock **out);
dlock_status dlock_leader(dlock_client *c, const char *name, dlock_info **out);
typedef struct dlock_observer dlock_observer;
void dlock_queue_free(dlock_queue *q);
int dlock_queue_fd(const dlock_queue *q);
int dlock_queue_pop_leader(dlock_queue *q, uint64_t *tag, dlock_status *status, dlock_lock **lock,
                           dlock_info **leader);
dlock_status dlock_inspect_queued(dlock_client *c, const char *name, dlock_queue *q, uint64_t tag);
dlock_status dlock_leader_queued(dlock_client *c, const char *name, dlock_queue *q, uint64_t tag);
dlock_status dlock_observe_queued(dlock_client *c, const char *name, dlock_queue *q, uint64_t tag,
                                  dlock_observer **out);
void dlock_observer_cancel(dlock_observer *ob);
dlock_status dlock_options_set_max_hold_ms(dlock_options *o, uint64_t ms);
dlock_status dlock_options_set_min_hold_ms(dlock_options *o, uint64_t ms);
dlock_status dlock_options_set_lock_delay_ms(dlock_options *o, uint64_t ms);
dlock_status dlock_break_with(dlock_client *c, const char *name, const char *reason, uint32_t flags,
                              dlock_info **broken);
int64_t dlock_info_closed_ms(const dlock_info *i);
const char *dlock_info_closed_by(const dlock_info *i);
dlock_status dlock_request_release(dlock_client *c, const char *name, const char *reason);
dlock_status dlock_options_set_on_release_requested_queued(dlock_options *o, dlock_queue *q,
                                                           uint64_t tag);
dlock_status dlock_options_set_reentrant(dlock_options *o, const char *context);
dlock_status dlock_acquire_many(dlock_client *c, const char *const *names, size_t n,
                                const dlock_options *o, dlock_lock **locks_out);
dlock_status dlock_release_many(dlock_lock **locks, size_t n);
dlock_status dlock_options_set_take(dlock_options *o, uint32_t k);
]]
ffi.cdef [[ char *getcwd(char *buf, size_t size); ]]  -- redeclaring it elsewhere is harmless
-- poll(2) and clock_gettime(2) for client:dispatch, under names of this module's own (a user's
-- own declarations of them, with their structs, clash with nothing).
ffi.cdef [[
int luadlock_poll(void *fds, unsigned long nfds, int timeout) __asm__("poll");
int luadlock_clock_gettime(int clock, void *ts) __asm__("clock_gettime");
]]

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

-- The job rules' max hold (dlock_options_set_max_hold_ms): a library from before it still loads
-- and serves locks; a max_hold_ms other than 0 then gets nil, message, "EINVAL" saying so.
local HAS_MAX_HOLD = pcall(function() return C.dlock_options_set_max_hold_ms end)
-- The job rules' min hold and lock delay likewise (a min_hold_ms or lock_delay_ms other than 0
-- with a library from before them gets nil, message, "EINVAL" saying so).
local HAS_MIN_HOLD = pcall(function() return C.dlock_options_set_min_hold_ms end)
local HAS_LOCK_DELAY = pcall(function() return C.dlock_options_set_lock_delay_ms end)
-- Breaking a lock (dlock_break_with) and the closed time it leaves (dlock_info_closed_ms,
-- dlock_info_closed_by): a library from before them still loads; client:break_lock then gets
-- nil, message, "EINVAL" saying so, and inspect shows closed_ms 0, closed_by "".
local HAS_BREAK = pcall(function() return C.dlock_break_with end)
local HAS_CLOSED = pcall(function() return C.dlock_info_closed_ms, C.dlock_info_closed_by end)
local BREAK_NOW = 0x1  -- DLOCK_BREAK_NOW
-- Release requests (dlock_request_release, dlock_options_set_on_release_requested_queued): a
-- library from before them still loads; client:request_release and on_release_requested then
-- get nil, message, "EINVAL" saying so.
local HAS_RELEASE_REQUEST = pcall(function()
  return C.dlock_request_release, C.dlock_options_set_on_release_requested_queued
end)
-- Reentrancy by a context (dlock_options_set_reentrant): a library from before it still loads;
-- an acquire with reentrant then gets nil, message, "EINVAL" saying so.
local HAS_REENTRANT = pcall(function() return C.dlock_options_set_reentrant end)
-- Several names at once (dlock_acquire_many, dlock_release_many): a library from before them
-- still loads; client:acquire_many then gets nil, message, "EINVAL" saying so (dlock.release_many
-- releases lock by lock).
local HAS_MANY = pcall(function() return C.dlock_acquire_many, C.dlock_release_many end)
-- Taking several of a semaphore's permits at once (dlock_options_set_take): a library from
-- before it still loads; a take other than 1 then gets nil, message, "EINVAL" saying so.
local HAS_TAKE = pcall(function() return C.dlock_options_set_take end)

-- The library's limits (dlock_limit_value): the longest lock name and owner label, in bytes.
M.MAX_NAME_BYTES = tonumber(C.dlock_limit_value(0))   -- DLOCK_LIMIT_NAME_BYTES
M.MAX_OWNER_BYTES = tonumber(C.dlock_limit_value(1))  -- DLOCK_LIMIT_OWNER_BYTES
M.MAX_VALUE_BYTES = tonumber(C.dlock_limit_value(3))  -- DLOCK_LIMIT_VALUE_BYTES
M.MAX_REASON_BYTES = 1024  -- DLOCK_MAX_REASON_BYTES: the longest reason break_lock and request_release take
M.MAX_LOCK_DELAY_MS = 60000  -- DLOCK_MAX_LOCK_DELAY_MS: the longest lock_delay_ms

-- dlock_kind and the capability bits of dlock_client_capabilities, by the names this binding
-- gives them (the library has numbers only).
local KINDS = { [0] = "exclusive", "shared" }
local KIND_NUMBERS = { exclusive = 0, shared = 1 }
local CAPABILITIES = { fencing_strict = 0x1, notifies = 0x2, shared = 0x4, permits = 0x8, fair = 0x10,
  observe_push = 0x20, ["break"] = 0x40, min_hold = 0x80, lock_delay = 0x100, release_request = 0x200 }

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

-- Holder k of a dlock_info snapshot as a table: { owner, remaining_ms, fencing_token, value }
-- (owner nil when the holder set none, remaining_ms nil for no expiry, fencing_token uint64_t
-- cdata or nil when unknown, value a string of any bytes, "" when it has none).
local value_len = ffi.new("size_t[1]")
local function holder_table(info, k)
  local owner = ffi.string(C.dlock_info_owner(info, k))
  local left = C.dlock_info_remaining_ms(info, k)
  local token = C.dlock_info_fencing_token(info, k)
  local data = C.dlock_info_value(info, k, value_len)
  local len = tonumber(value_len[0])
  return {
    owner = owner ~= "" and owner or nil,
    remaining_ms = left >= 0 and tonumber(left) or nil,
    fencing_token = token ~= 0 and token or nil,
    value = (data ~= nil and len > 0) and ffi.string(data, len) or "",  -- binary-safe
  }
end

-- An observer's report (a dlock_info * from dlock_queue_pop_leader, NULL when nobody leads) as
-- the leader's holder table or nil; frees the snapshot.
local function take_report(info)
  if info == nil then return nil end
  local ok, leader = pcall(holder_table, info, 0)
  C.dlock_info_free(info)
  if not ok then error(leader, 0) end
  return leader
end

-- An inspection's snapshot as { kind, holders, permits, closed_ms, closed_by } (read_info's and
-- break_lock's answer); frees it.
local function info_table(info)
  local ok, t = pcall(function()
    local holders = {}
    for k = 0, C.dlock_info_holders(info) - 1 do holders[#holders + 1] = holder_table(info, k) end
    local kind = C.dlock_info_kind(info)
    local closed_ms, closed_by = 0, ""
    if HAS_CLOSED then
      closed_ms = math.max(0, tonumber(C.dlock_info_closed_ms(info)))
      closed_by = ffi.string(C.dlock_info_closed_by(info))
    end
    return { kind = KINDS[kind] or kind, holders = holders, permits = tonumber(C.dlock_info_permits(info)),
      closed_ms = closed_ms, closed_by = closed_by }
  end)
  C.dlock_info_free(info)
  if not ok then error(t, 0) end
  return t
end

-- ----- clients ---------------------------------------------------------------------------------

local Client = {}
Client.__index = Client
local Lock = {}
Lock.__index = Lock
local Group = {}  -- the locks of client:acquire_many
Group.__index = Group
local Observer = {}
Observer.__index = Observer

-- ----- finalizers: no I/O ----------------------------------------------------------------------
--
-- A collected lock starts its release and does not wait for it (dlock_release_async with no
-- callback: nothing comes back to Lua). A collected client cannot be closed without blocking
-- (dlock_client_close joins the library's thread and releases what it holds), so its finalizer
-- only queues it here; close_forgotten() closes it at a safe point.

local function gc_lock(h) C.dlock_release_async(h, nil, nil) end
-- dlock_observer_cancel only stops the observer (it waits for no server): no I/O.
local function gc_observer(h) C.dlock_observer_cancel(h) end

local forgotten = {}
local function gc_client(h) forgotten[#forgotten + 1] = h end

local function close_forgotten()
  if forgotten[1] == nil then return end
  local list = forgotten
  forgotten = {}  -- a finalizer running meanwhile appends to the new list
  for _, h in ipairs(list) do C.dlock_client_close(h) end
end

-- ----- nginx (ngx_lua): yielding waits ---------------------------------------------------------

local ngx = rawget(_G, "ngx")
local IN_NGX = type(ngx) == "table" and type(ngx.get_phase) == "function"
  and type(ngx.config) == "table" and ngx.config.subsystem ~= nil
-- true when this module runs under ngx_lua (http or stream subsystem).
M.in_nginx = IN_NGX

-- The worker's timer period (seconds): lost-lock reports, forgotten clients, stray outcomes.
M.ngx_interval = 0.1
-- How often (seconds) outcomes are collected while a call is in flight.
M.ngx_busy_interval = 0.001
-- How often (seconds) the worker collects observer reports while it has observers (nginx has
-- no way to wait on the queue's fd: a timer checks it this often). Read at the worker's first
-- observe.
M.ngx_observe_interval = 0.01
-- A safety net: the binding waits for the library's answer to an acquire at most wait_ms +
-- 2 x (connect_timeout_ms + timeout_ms, from the client's URL) + ngx_grace seconds, and for a
-- release's or extend's as long without wait_ms: past the library's own bound for every call
-- (docs/urls.md, "How long a call can take"). Then it cancels the acquire and says "EIO". An
-- acquire with wait_ms = -1 (the default) has no bound, like the library's wait: it re-arms
-- its semaphore wait every minute, yielding all along.
M.ngx_grace = 5

-- Phases where a light thread may yield (ngx.semaphore:wait works there).
local YIELDS = {
  rewrite = true, server_rewrite = true, access = true, content = true, timer = true,
  ssl_cert = true, ssl_session_fetch = true, ssl_client_hello = true, preread = true,
}

local W  -- this worker's state: one queue, the calls in flight, the timer
local tag_p = ffi.new("uint64_t[1]")
local status_p = ffi.new("dlock_status[1]")
local lock_p = ffi.new("dlock_lock *[1]")
local leader_p = ffi.new("dlock_info *[1]")

local function ngx_log(level, ...)
  local ok = pcall(ngx.log, level, ...)
  if not ok then io.stderr:write("dlock: ", table.concat({ ... }), "\n") end
end

-- Calls the user's fn(...); an error it raises is written to nginx's error log (or stderr)
-- and ignored: what: "on_lost" or "observe".
local function call_user(what, fn, ...)
  local ok, err = pcall(fn, ...)
  if not ok then
    if IN_NGX then
      ngx_log(ngx.ERR, "dlock: error in ", what, " callback (ignored): ", tostring(err))
    else
      io.stderr:write("dlock: error in ", what, " callback (ignored): ", tostring(err), "\n")
    end
  end
end

local function call_on_lost(on_lost, lock) call_user("on_lost", on_lost, lock) end

-- Calls lock's on_lost once (or, without one, says so in nginx's error log: never silent).
local function report_lost(lock, why)
  if lock._h == nil or lock._lost_reported then return false end
  lock._lost_reported = true
  lock._client._watched[lock] = nil
  local on_lost = lock._on_lost
  if on_lost then
    -- In nginx, in a timer's light thread of its own: it may yield (cosockets, ngx.sleep)
    -- without holding up the outcomes other requests wait for.
    if not (IN_NGX and ngx.timer.at(0, function() call_on_lost(on_lost, lock) end)) then
      call_on_lost(on_lost, lock)
    end
  elseif IN_NGX then  -- the library's message names the lock and its token
    ngx_log(ngx.WARN, "dlock: ", why or ("lock '" .. lock.name .. "' (fencing token "
      .. lock:fencing_token_string() .. ") was lost: its local deadline passed"),
      " (no on_lost callback)")
  end
  return true
end

-- Calls lock's on_release_requested(lock, reason) while it still holds (a request queued before
-- its release or loss is dropped): under nginx in a timer light thread of its own (it may yield,
-- and release), else here.
local function call_on_release(lock, reason)
  if lock._h ~= nil and not lock._lost_reported then
    call_user("on_release_requested", lock._on_release_requested, lock, reason)
  end
end

local function report_release_requested(lock, reason)
  if lock._h == nil or lock._lost_reported then return false end
  if not (IN_NGX and ngx.timer.at(0, function() call_on_release(lock, reason) end)) then
    call_on_release(lock, reason)
  end
  return true
end

-- Under nginx, W.requested[tag] while an acquire that listens for release requests is under
-- way: requests heard before its lock exists wait in W.early[tag].
local PENDING = {}

-- Gives back what an outcome nobody waits for carries.
local function give_back(op)
  if op.lock ~= nil then
    C.dlock_release_async(op.lock, nil, nil)
    op.lock = nil
  end
end

-- nil, message, code for a call in flight that failed.
local function op_failed(op)
  local code = M.code(op.status)
  return nil, (op.msg ~= nil and op.msg ~= "") and op.msg or "DLOCK_" .. code, code
end

-- An observer's reports under nginx wait in ob._reports (ob._head < i <= ob._tail; NOBODY for
-- "nobody leads") for its delivery light thread, which calls fn with each in turn: one thread
-- per observer at a time, so fn may yield (cosockets, ngx.sleep) and still sees the reports in
-- their order, without holding up the outcomes other requests wait for.
local NOBODY = {}

local function deliver(premature, ob)
  if not premature then
    while ob._h ~= nil and ob._head < ob._tail do
      local i = ob._head + 1
      ob._head = i
      local leader = ob._reports[i]
      ob._reports[i] = nil
      if leader == NOBODY then leader = nil end
      call_user("observe", ob._fn, leader, ob)
    end
  end
  ob._delivering = false
end

local function queue_report(ob, leader)
  ob._tail = ob._tail + 1
  ob._reports[ob._tail] = leader or NOBODY
  if ob._delivering then return end
  ob._delivering = true
  if not ngx.timer.at(0, deliver, ob) then deliver(false, ob) end  -- no timer to be had: here
end

-- Pops every outcome in the worker's queue (never blocks) and hands each to its waiter.
local function drain()
  local w = W
  local n = 0
  while true do
    local kind = C.dlock_queue_pop_leader(w.q, tag_p, status_p, lock_p, leader_p)
    if kind <= 0 then return n end
    n = n + 1
    local tag, status, l = tonumber(tag_p[0]), tonumber(status_p[0]), lock_p[0]
    if l == nil then l = nil end  -- a NULL pointer becomes nil
    -- NULL (nil) but for an observer's report, or a queued inspect's snapshot (DONE)
    local snapshot = leader_p[0]
    local leader = nil
    if kind == 1 then
      if snapshot ~= nil then snapshot = info_table(snapshot) else snapshot = nil end
    else
      leader = take_report(snapshot)
    end
    local msg = status ~= 0 and ffi.string(C.dlock_last_error()) or nil
    if kind == 1 then  -- DLOCK_QUEUE_DONE
      local op = w.ops[tag]
      if op then
        w.ops[tag] = nil
        w.pending = w.pending - 1
        op.done, op.status, op.msg, op.lock, op.info = true, status, msg, l, snapshot
        if op.abandoned then
          give_back(op)
        elseif op.sema then
          op.sema:post(1)
          w.handed[op] = ngx.now()
        elseif status ~= 0 then  -- a release started where nobody could wait for it
          ngx_log(ngx.WARN, "dlock: ", op.what, " of '", op.name, "': ", msg)
        end
      elseif l ~= nil then
        C.dlock_release_async(l, nil, nil)
      end
    elseif kind == 2 then  -- DLOCK_QUEUE_LOST
      local lock = w.watch[tag]
      w.watch[tag] = nil
      if lock then report_lost(lock, msg) end
    elseif kind == 3 then  -- DLOCK_QUEUE_LEADER: dropped once its observer is cancelled
      local ob = w.observed[tag]
      if ob and ob._h ~= nil then queue_report(ob, leader) end
    elseif kind == 5 then  -- DLOCK_QUEUE_RELEASE_REQUESTED: the entry's message is the reason
      local reason = ffi.string(C.dlock_last_error())
      local lock = w.requested[tag]
      if lock == PENDING then
        local early = w.early[tag] or {}
        early[#early + 1] = reason
        w.early[tag] = early
      elseif lock then
        report_release_requested(lock, reason)
      end
    end
  end
end

-- The worker's timer: outcomes, lost locks (also those only past their local deadline, which no
-- heartbeat reports), outcomes posted to a waiter that is gone, forgotten clients.
local function tick(premature)
  local ok, err = pcall(function()
    drain()
    for client in pairs(W.clients) do client:poll() end
    local now = ngx.now()
    for op, at in pairs(W.handed) do
      if now - at > 1 then  -- posted, never picked up: its light thread was killed
        W.handed[op] = nil
        give_back(op)
      end
    end
    if not premature then close_forgotten() end
  end)
  if not ok then ngx_log(ngx.ERR, "dlock: worker timer: ", tostring(err)) end
end

-- While the worker has observers: collects their reports every ngx_observe_interval. A timer of
-- its own, each run a fresh light thread: one that never ended (a loop around ngx.sleep) would
-- keep, in its stack's dead slots, what drain last handled (a lock nobody else references, that
-- its finalizer should release).
local function observe_tick(premature)
  if premature or next(W.observed) == nil then return end
  local ok, err = pcall(drain)
  if not ok then ngx_log(ngx.ERR, "dlock: observers' timer: ", tostring(err)) end
end

-- While calls are in flight: drain every ngx_busy_interval, in a timer's light thread.
local function busy(premature)
  local ok, err = pcall(function()
    while true do
      drain()
      if W.pending == 0 then break end
      ngx.sleep(M.ngx_busy_interval)
    end
  end)
  W.busy = false
  if not ok then ngx_log(ngx.ERR, "dlock: ", tostring(err)) end
  if W.pending > 0 and not premature then  -- e.g. ngx.sleep refused while the worker exits
    W.busy = ngx.timer.at(M.ngx_busy_interval, busy) and true or false
  end
end

local function kick(w)
  if w.busy then return end
  local ok, err = ngx.timer.at(0, busy)
  if ok then
    w.busy = true
  elseif not w.kick_failed then  -- the worker's timer still collects, every ngx_interval
    w.kick_failed = true
    ngx_log(ngx.WARN, "dlock: ngx.timer.at failed (", tostring(err), "); outcomes are ",
      "collected every ", M.ngx_interval, " s instead")
  end
end

-- This worker's state, made on first use in the worker.
local function worker()
  local pid = ngx.worker.pid()
  if W and W.pid == pid then return W end
  local q = ffi.new("dlock_queue *[1]")
  local s = C.dlock_queue_new(q)
  if s ~= 0 then raise("dlock: dlock_queue_new: " .. ffi.string(C.dlock_last_error())) end
  local ok, semaphore = pcall(require, "ngx.semaphore")
  if not ok then
    raise("dlock: ngx.semaphore (lua-resty-core) is needed to wait without blocking the worker: "
      .. tostring(semaphore) .. "; or open the client with { blocking = true }")
  end
  W = {
    pid = pid,
    q = q[0],  -- lives as long as the worker; never freed
    semaphore = semaphore,
    ops = {},  -- tag -> call in flight
    pending = 0,
    handed = {},  -- op -> when its semaphore was posted, until its waiter picks it up
    watch = setmetatable({}, { __mode = "v" }),  -- tag -> lock, for DLOCK_QUEUE_LOST
    observed = setmetatable({}, { __mode = "v" }),  -- tag -> observer, for DLOCK_QUEUE_LEADER
    -- tag -> lock (or PENDING), for DLOCK_QUEUE_RELEASE_REQUESTED
    requested = setmetatable({}, { __mode = "v" }),
    early = {},  -- tag -> reasons heard while requested[tag] was PENDING
    clients = setmetatable({}, { __mode = "k" }),
    next_tag = 0,
    busy = false,
    observe_timer = false,  -- observe_tick's, started by the worker's first observe
  }
  local started, err = ngx.timer.every(M.ngx_interval, tick)
  if not started then raise("dlock: ngx.timer.every: " .. tostring(err)) end
  return W
end

-- Registers a call in flight; the caller starts it with tag. sema: whether someone will wait.
local function new_op(w, what, name, sema)
  w.next_tag = w.next_tag + 1
  return w.next_tag, { what = what, name = name, sema = sema and w.semaphore.new(0) or nil }
end

local function started(w, tag, op)
  w.ops[tag] = op
  w.pending = w.pending + 1
  kick(w)
end

-- Waits (yielding) until op is done or bound seconds pass (nil: no bound). true when done.
local function wait_op(w, op, bound)
  ngx.update_time()
  local deadline = bound and ngx.now() + bound
  while not op.done do
    local t = 60
    if deadline then
      ngx.update_time()
      t = deadline - ngx.now()
      if t <= 0 then break end
      if t > 60 then t = 60 end
    end
    local ok, err = op.sema:wait(t)
    if not ok and err ~= "timeout" then
      op.abandoned = true
      raise("dlock: waiting for the library's answer: " .. tostring(err))
    end
  end
  w.handed[op] = nil
  return op.done
end

-- The phase, when this yielding call may wait in it; otherwise raises (or returns nil when
-- soft, for release).
local function yielding_phase(what, soft)
  local phase = ngx.get_phase()
  if YIELDS[phase] then return phase end
  if soft then return nil end
  raise("dlock: " .. what .. " cannot wait in nginx's '" .. phase .. "' phase (a light thread "
    .. "cannot yield there): call it from rewrite, access or content, or in ngx.timer.at(0, fn)")
end

local function check_process(self)
  local pid = ngx.worker.pid()
  if self._pid ~= pid then
    raise("dlock: this client was opened in process " .. tostring(self._pid) .. ", not in this one ("
      .. pid .. "): the library's thread does not survive a fork. Open one client per worker, "
      .. "in init_worker_by_lua*")
  end
end

-- ----- the client's calls ----------------------------------------------------------------------

-- Opens a client (URLs: README.md; redis://[[user]:password@]host[:port][/db][?params], ...).
-- opts (optional): blocking = true keeps the blocking calls under nginx (see the top).
-- Returns the client, or nil, message, code ("EINVAL", "EIO", "EAUTH", ...).
-- Under nginx: raises in init_by_lua* (the master process), whose fork the library's thread
-- would not survive.
function M.open(url, opts)
  check_string(url, 1, "open", "string")
  local blocking = false
  if opts ~= nil then
    if type(opts) ~= "table" then argerror(2, "open", "table expected, got " .. type(opts)) end
    for k, v in pairs(opts) do
      if k ~= "blocking" then argerror(2, "open", "unknown option '" .. tostring(k) .. "'") end
      if type(v) ~= "boolean" then argerror(2, "open", "blocking must be a boolean, got " .. type(v)) end
    end
    blocking = opts.blocking == true
  end
  local w
  if IN_NGX then
    local phase = ngx.get_phase()
    if phase == "init" then
      raise("dlock.open: called in init_by_lua* (nginx's master process), whose fork the "
        .. "library's thread does not survive: open the client in init_worker_by_lua*, one per "
        .. "worker process")
    end
    if not blocking then w = worker() end
  else
    close_forgotten()
  end
  local out = ffi.new("dlock_client *[1]")
  local s = C.dlock_client_open(url, out)
  if s ~= 0 then return fail(s) end
  local self = setmetatable({
    _h = ffi.gc(out[0], gc_client),
    _url = url_shown(url),
    _watched = setmetatable({}, { __mode = "k" }),  -- locks with on_lost -> true
    _requested = setmetatable({}, { __mode = "v" }),  -- outside nginx: tag -> lock, for release requests
    _observers = {},  -- tag -> observer, until cancelled: the client keeps its observers
    _next_tag = 0,    -- outside nginx: the tags of this client's queue (_q, made on first use)
    _pid = IN_NGX and ngx.worker.pid() or nil,
    _yield = w ~= nil,
    -- 2 x (connect_timeout_ms + timeout_ms), in seconds (the library's defaults: 2000, 3000)
    _bound = 2 * ((tonumber(url:match("[?&]connect_timeout_ms=(%d+)")) or 2000)
      + (tonumber(url:match("[?&]timeout_ms=(%d+)")) or 3000)) / 1000,
  }, Client)
  if IN_NGX then
    if w == nil then w = worker() end  -- its timer polls blocking clients for on_lost too
    w.clients[self] = true
  end
  return self
end

-- Releases every lock the client still holds, closes its connections, stops its thread.
-- Locks still referenced stay safe: their release() then returns nil, msg, "NOT_HELD".
-- A blocking call, in nginx too (the library has no other close): call it when the worker
-- exits, or keep the client for the worker's life.
function Client:close()
  local h = self._h
  if h == nil then return true end
  for _, ob in pairs(self._observers) do ob:cancel() end
  self._h = nil
  ffi.gc(h, nil)
  if IN_NGX and W then W.clients[self] = nil end
  C.dlock_client_close(h)
  local q = self._q
  if q ~= nil then  -- reports still in it are dropped
    self._q = nil
    C.dlock_queue_free(ffi.gc(q, nil))
  end
  return true
end

function Client:closed() return self._h == nil end

function Client:__tostring()
  return "dlock.client(" .. self._url .. ", " .. (self._h and "open" or "closed") .. ")"
end

-- What the client's backend offers: a table of booleans { fencing_strict, notifies, shared,
-- permits, fair, observe_push (observers told of each change by the server), ["break"]
-- (client:break_lock), min_hold, lock_delay (the acquire options min_hold_ms, lock_delay_ms),
-- release_request (client:request_release, the acquire option on_release_requested) }
-- (dlock_client_capabilities); nil, message, "EINVAL" once closed.
function Client:capabilities()
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local bits = C.dlock_client_capabilities(h)
  local caps = {}
  for name, mask in pairs(CAPABILITIES) do caps[name] = bit.band(bits, mask) ~= 0 end
  return caps
end

-- Who holds the lock called name now: { kind = "exclusive" | "shared", holders = { { owner,
-- remaining_ms, fencing_token }, ... }, permits = n, closed_ms = n, closed_by = s } (holders
-- empty when free; owner nil when the holder set none, remaining_ms nil for no expiry,
-- fencing_token uint64_t cdata or nil when unknown; permits the semaphore's size, 0 for a lock
-- or a free name; closed_ms > 0 while a broken lock's name stays closed, with no holder, and
-- closed_by then "broken", else 0 and ""), or nil, message, code.
-- A snapshot read from the server, stale as soon as it returns: never decide from it whether to
-- take the lock. Owner tokens are never shown, only the labels.
-- dlock_inspect or dlock_leader (read) of name: { kind, holders, permits } as below, or nil,
-- message, code.
-- Under nginx (a yielding client) it is the _queued form, and the request's light thread yields
-- while it waits, like acquire; it raises in phases that cannot yield.
local function read_info(self, read, read_queued, name, fname)
  check_string(name, 1, fname, "string")
  if self._pid then check_process(self) end
  if self._yield then yielding_phase("client:" .. fname) end
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  if self._yield then
    local w = W
    local tag, op = new_op(w, fname, name, true)
    local s = read_queued(h, name, w.q, tag)
    if s ~= 0 then return fail(s) end
    started(w, tag, op)
    local grace = self._bound + M.ngx_grace
    if not wait_op(w, op, grace) then
      op.abandoned = true
      return nil, fname .. " of '" .. name .. "': no answer within " .. grace .. " s", "EIO"
    end
    if op.status ~= 0 then return op_failed(op) end
    return op.info
  end
  local out = ffi.new("dlock_info *[1]")
  local s = read(h, name, out)
  if s ~= 0 then return fail(s) end
  return info_table(out[0])
end

-- This client's metrics in the Prometheus text format (docs/metrics.md): counters of
-- acquires, releases, renewals and losses by cause, wait and hold histograms. No round trip.
-- The string, or nil, message, code once closed.
function Client:metrics_text()
  if getmetatable(self) ~= Client then raise("dlock: call it as client:metrics_text()") end
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local needed = ffi.new("size_t[1]")
  for _ = 1, 4 do  -- the text may grow between the two calls
    local s = C.dlock_client_metrics_text(h, nil, 0, needed)
    if s ~= 0 then return fail(s) end
    local len = tonumber(needed[0]) + 256
    local buf = ffi.new("char[?]", len)
    s = C.dlock_client_metrics_text(h, buf, len, needed)
    if s == 0 then return ffi.string(buf, needed[0]) end
  end
  return nil, "the metrics text kept growing", "EINTERNAL"
end

function Client:inspect(name)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:inspect(name)") end
  return read_info(self, C.dlock_inspect, C.dlock_inspect_queued, name, "inspect")
end

-- An operator's takeover of the lock called name (dlock_break_with; `break` is a keyword):
-- deletes every hold of it (exclusive, shared or semaphore), never its fencing counter, so the
-- next token is greater than every broken holder's. Each broken holder is reported lost with the
-- cause "broken" (on_lost; lock:lost_cause() "broken: an operator broke the lock: REASON") at its
-- next renewal, so within its heartbeat period; one without heartbeats at its next extend or
-- release. reason (optional): the operator's words for the holders, at most MAX_REASON_BYTES
-- (1024) bytes; nil or "" for none. now (optional): false (the default) leaves the name closed,
-- with no holder, until the broken leases would have ended on the server (inspect shows
-- closed_ms > 0, closed_by "broken"); true frees it at once, for a resource that checks fencing
-- tokens. Returns a table like inspect's of what it broke: holders (owner, fencing_token,
-- remaining_ms: what was left of each lease; empty when nobody held it) and closed_ms, how long
-- the name now stays closed; or nil, message, code ("EINVAL" on a backend without the "break"
-- capability). One round trip, within the URL's timeout_ms.
-- Under nginx it blocks the worker for that round trip, as client:close does: the library has
-- no queued or asynchronous break to yield on. It may be called in any phase.
function Client:break_lock(name, reason, now)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:break_lock(name, reason, now)") end
  check_string(name, 1, "break_lock", "string")
  if reason ~= nil then check_string(reason, 2, "break_lock", "string") end
  if now ~= nil and type(now) ~= "boolean" then
    argerror(3, "break_lock", "boolean expected, got " .. type(now))
  end
  if self._pid then check_process(self) end
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  if not HAS_BREAK then
    return nil, "break_lock: libdlock " .. version .. " at " .. library_path
      .. " cannot break a lock (dlock_break_with); install a newer one", "EINVAL"
  end
  local out = ffi.new("dlock_info *[1]")
  local s = C.dlock_break_with(h, name, reason, now and BREAK_NOW or 0, out)
  if s ~= 0 then return fail(s) end
  return info_table(out[0])
end

-- Asks every current holder of the lock called name to let go, with reason (optional: nil or
-- "" for none; at most MAX_REASON_BYTES bytes) (dlock_request_release): a cooperative takeover,
-- short of break_lock. Nothing is taken: a holder acquired with on_release_requested hears it
-- (its function gets the reason) and may release, or not; holders acquired without it hear
-- nothing. Returns true when the name had holders to ask, false, message, "NOT_HELD" when
-- nobody holds it (nothing is sent), or nil, message, code ("EINVAL" on a backend without the
-- "release_request" capability). true says the request went out, not that it was heard: on
-- Redis a holder hears it once its subscription is live, a round trip after its acquire (a
-- request sent before is missed: ask again). One round trip, within the URL's timeout_ms;
-- under nginx it blocks the worker for it, as break_lock does.
function Client:request_release(name, reason)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:request_release(name, reason)") end
  check_string(name, 1, "request_release", "string")
  if reason ~= nil then check_string(reason, 2, "request_release", "string") end
  if self._pid then check_process(self) end
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  if not HAS_RELEASE_REQUEST then
    return nil, "request_release: libdlock " .. version .. " at " .. library_path
      .. " cannot ask a holder to let go (dlock_request_release); install a newer one", "EINVAL"
  end
  local s = C.dlock_request_release(h, name, reason)
  if s == 0 then return true end
  local _, msg, code = fail(s)
  if code == "NOT_HELD" then return false, msg, code end
  return nil, msg, code
end

-- The current leader of the election name (see client:campaign): its holder table { owner,
-- remaining_ms, fencing_token (the term), value }, or nil when nobody leads; nil, message,
-- code on failure ("EINVAL" when the name is held shared or is a semaphore: no election).
-- A snapshot, like inspect.
function Client:leader(name)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:leader(name)") end
  local info, msg, code = read_info(self, C.dlock_leader, C.dlock_leader_queued, name, "leader")
  if not info then return nil, msg, code end
  return info.holders[1]
end

-- ----- observers -------------------------------------------------------------------------------
--
-- dlock_observe_queued: the library's thread queues each report on a dlock_queue, and the
-- binding calls fn on the caller's thread. Outside nginx each client has a queue of its own (made
-- by its first observe or pollfd), drained by client:poll and client:dispatch; under nginx the
-- worker's queue, drained by the worker's timers, and fn runs in a timer light thread.

-- Outside nginx: this client's queue, made on first use; or nil, message, code.
local function client_queue(self)
  local q = self._q
  if q ~= nil then return q end
  local out = ffi.new("dlock_queue *[1]")
  local s = C.dlock_queue_new(out)
  if s ~= 0 then return fail(s) end
  q = ffi.gc(out[0], C.dlock_queue_free)
  self._q = q
  return q
end

-- Outside nginx: pops every report in the client's queue (never blocks) and calls each
-- observer's fn, and each on_release_requested, in the order the library made them. Returns how
-- many calls it made.
local function deliver_reports(self)
  local q = self._q
  local n = 0
  while q ~= nil do
    local kind = C.dlock_queue_pop_leader(q, tag_p, nil, nil, leader_p)
    if kind <= 0 then break end
    local tag = tonumber(tag_p[0])
    local leader = take_report(leader_p[0])
    if kind == 5 then  -- DLOCK_QUEUE_RELEASE_REQUESTED: the entry's message is the reason
      local reason = ffi.string(C.dlock_last_error())
      local lock = self._requested[tag]  -- nil once collected
      if lock and report_release_requested(lock, reason) then n = n + 1 end
    end
    local ob = self._observers[tag]  -- nil once cancelled: its report is dropped
    if kind == 3 and ob and ob._h ~= nil then
      n = n + 1
      call_user("observe", ob._fn, leader, ob)
    end
    q = self._q  -- fn may have closed the client
  end
  return n
end

-- Observes who leads the election name (see client:campaign): fn(leader, observer) is called
-- with the leader's holder table { owner, remaining_ms, fencing_token (the term), value }, or
-- nil when nobody leads: first as it stands now, then at each change of leader or of the
-- leader's value (dlock_observe). Never an older state after a newer one, and terms never
-- decrease; states that come and go faster than the observer reads may merge into the latest.
-- A name held shared or as a semaphore reads as nobody leading. How late: a release,
-- hand-over or new value at once on Redis; other changes (a leader taking a name nobody held,
-- a new leader after an expiry) within the library's poll interval, 500 ms.
-- Returns the observer (observer:cancel() stops it; the client keeps it until then, or until
-- client:close), or nil, message, code.
-- Where fn runs: outside nginx, on the caller's thread, from client:dispatch(timeout_ms) (waits
-- for reports) and client:poll() (delivers those waiting); under nginx, in a timer light thread
-- of the worker (it may yield; one report at a time per observer, in order), within about
-- dlock.ngx_observe_interval of the report. An error fn raises is written to stderr (the error
-- log) and ignored.
function Client:observe(name, fn)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:observe(name, fn)") end
  check_string(name, 1, "observe", "string")
  if type(fn) ~= "function" then
    local mt = getmetatable(fn)
    if not (mt and mt.__call) then argerror(2, "observe", "function expected, got " .. type(fn)) end
  end
  if self._pid then check_process(self) end
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local q, tag, w
  if IN_NGX then
    w = worker()
    w.next_tag = w.next_tag + 1
    q, tag = w.q, w.next_tag
  else
    local msg, code
    q, msg, code = client_queue(self)
    if q == nil then return nil, msg, code end
    self._next_tag = self._next_tag + 1
    tag = self._next_tag
  end
  local out = ffi.new("dlock_observer *[1]")
  local s = C.dlock_observe_queued(h, name, q, tag, out)
  if s ~= 0 then return fail(s) end
  local ob = setmetatable({
    _h = ffi.gc(out[0], gc_observer),
    _client = self,
    _fn = fn,
    _tag = tag,
    name = name,
  }, Observer)
  self._observers[tag] = ob
  if w then
    ob._reports, ob._head, ob._tail, ob._delivering = {}, 0, 0, false
    w.observed[tag] = ob
    if not w.observe_timer then
      local ok, err = ngx.timer.every(M.ngx_observe_interval, observe_tick)
      -- without it, the worker's timer still collects reports, every ngx_interval
      if not ok then ngx_log(ngx.WARN, "dlock: ngx.timer.every failed (", tostring(err), ")") end
      w.observe_timer = ok and true or false
    end
  end
  return ob
end

-- Monotonic milliseconds (CLOCK_MONOTONIC), for dispatch's deadline.
local timespec = ffi.new("struct { long tv_sec; long tv_nsec; }[1]")
local function monotonic_ms()
  ffi.C.luadlock_clock_gettime(1, timespec)  -- CLOCK_MONOTONIC
  return tonumber(timespec[0].tv_sec) * 1000 + tonumber(timespec[0].tv_nsec) / 1e6
end
local pollfd = ffi.new("struct { int fd; short events; short revents; }[1]")

local function not_in_nginx(what)
  if IN_NGX then
    raise("dlock: " .. what .. " is for plain LuaJIT: under nginx the worker's timers deliver "
      .. "observer reports themselves")
  end
end

-- Outside nginx: waits until there is something to deliver, at most timeout_ms milliseconds
-- (-1 = no limit, the default; 0 = do not wait), then delivers it as client:poll() does
-- (observer reports and release requests, then on_lost calls). Returns how many calls it made:
-- 0 only once timeout_ms has passed with nothing to deliver; nil, message, "EINVAL" for a
-- closed client. Only an observer report or a release request ends the wait early: a lock
-- found lost meanwhile is reported when it returns. Under nginx it raises (the worker delivers
-- reports itself).
function Client:dispatch(timeout_ms)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:dispatch(timeout_ms)") end
  if timeout_ms == nil then timeout_ms = -1 end
  if type(timeout_ms) ~= "number" then
    argerror(1, "dispatch", "timeout_ms must be a number, got " .. type(timeout_ms))
  end
  check_ms(timeout_ms, 1, "dispatch", "timeout_ms", -1, 2^53)
  not_in_nginx("client:dispatch")
  if self._h == nil then return nil, "client is closed", "EINVAL" end
  local q, msg, code = client_queue(self)
  if q == nil then return nil, msg, code end
  local deadline = timeout_ms >= 0 and monotonic_ms() + timeout_ms or nil
  while true do
    local n = self:poll()
    if n > 0 or self._h == nil then return n end
    local wait = -1
    if deadline then
      wait = math.ceil(deadline - monotonic_ms())
      if wait <= 0 then return 0 end
      if wait > 2^31 - 1 then wait = 2^31 - 1 end
    end
    pollfd[0].fd = C.dlock_queue_fd(self._q)
    pollfd[0].events = 1  -- POLLIN
    pollfd[0].revents = 0
    ffi.C.luadlock_poll(pollfd, 1, wait)  -- -1 with EINTR: looked at again, with what is left
  end
end

-- Outside nginx: the fd that becomes readable when observer reports (or release requests) wait
-- to be delivered, for an event loop of your own (luv's uv.new_poll, cqueues, ...): when it is
-- readable, call client:poll(), which also re-arms it. Owned by the client: do not close it, and stop
-- watching it before client:close(). nil, message, "EINVAL" for a closed client; under nginx
-- it raises.
function Client:pollfd()
  if getmetatable(self) ~= Client then raise("dlock: call it as client:pollfd()") end
  not_in_nginx("client:pollfd")
  if self._h == nil then return nil, "client is closed", "EINVAL" end
  local q, msg, code = client_queue(self)
  if q == nil then return nil, msg, code end
  return C.dlock_queue_fd(q)
end

-- Stops the observer: fn is not called again (not even for reports already collected). true;
-- again, or after client:close(), it does nothing and returns true. An observer is also
-- cancelled when it is collected, which happens only with its client (which keeps it).
function Observer:cancel()
  if getmetatable(self) ~= Observer then raise("dlock: call it as observer:cancel()") end
  local h = self._h
  if h == nil then return true end
  self._h = nil
  ffi.gc(h, nil)
  C.dlock_observer_cancel(h)  -- no report is queued once it returns
  local client = self._client
  client._observers[self._tag] = nil
  if self._reports then  -- nginx: what was collected and not yet delivered is dropped
    self._reports, self._head, self._tail = {}, 0, 0
    if W then W.observed[self._tag] = nil end
  end
  return true
end

function Observer:cancelled() return self._h == nil end

function Observer:__tostring()
  return string.format("dlock.observer(%q, %s)", self.name, self._h and "observing" or "cancelled")
end

-- The wait when opts give none: no limit, like `dlock exec` and threading.Lock (the library's
-- own default, 0, is one try, so the binding always sets it).
local DEFAULT_WAIT_MS = -1
local NO_OPTS = {}

-- Options a campaign does not take: a leadership is exclusive and waits without limit.
local NOT_CAMPAIGN = { wait_ms = true, kind = true, shared = true, permits = true, take = true }

-- Returns the dlock_options for opts (nil: the defaults), on_lost, the wait in ms (a number
-- or 64-bit cdata) and on_release_requested; or false, message, code when the library refuses
-- a value. campaign: opts are a campaign's (no wait_ms, kind, shared, permits or take).
local function build_options(opts, fname, campaign)
  if opts == nil then opts = NO_OPTS end
  if type(opts) ~= "table" then argerror(2, fname, "table expected, got " .. type(opts)) end
  if campaign then
    for k in pairs(opts) do
      if NOT_CAMPAIGN[k] then
        argerror(2, fname, "a campaign takes no option '" .. k .. "' (a leadership is exclusive and "
          .. "waits without limit; for a bounded wait, use acquire with a value)")
      end
    end
  end
  local lease = opts.lease_ms and check_ms(opts.lease_ms, 2, fname, "lease_ms", 0, 2^53)
  local wait = DEFAULT_WAIT_MS
  if opts.wait_ms ~= nil then wait = check_ms(opts.wait_ms, 2, fname, "wait_ms", -1, 2^53) end
  local hb = opts.heartbeat_ms and check_ms(opts.heartbeat_ms, 2, fname, "heartbeat_ms", 0, 2^53)
  local max_hold = opts.max_hold_ms and check_ms(opts.max_hold_ms, 2, fname, "max_hold_ms", 0, 2^53)
  if max_hold == 0 then max_hold = nil end  -- 0 is none, the default: nothing to set
  local min_hold = opts.min_hold_ms and check_ms(opts.min_hold_ms, 2, fname, "min_hold_ms", 0, 2^53)
  if min_hold == 0 then min_hold = nil end  -- likewise
  local lock_delay = opts.lock_delay_ms and check_ms(opts.lock_delay_ms, 2, fname, "lock_delay_ms", 0, 2^53)
  if lock_delay == 0 then lock_delay = nil end  -- likewise
  local rmin, rmax
  if opts.retry_ms ~= nil then
    if type(opts.retry_ms) ~= "table" then
      argerror(2, fname, "retry_ms must be a { min_ms, max_ms } table")
    end
    rmin = check_ms(opts.retry_ms[1], 2, fname, "retry_ms[1]", 0, 2^53)
    rmax = check_ms(opts.retry_ms[2], 2, fname, "retry_ms[2]", 0, 2^53)
  end
  if opts.owner ~= nil then check_string(opts.owner, 2, fname, "owner") end
  if opts.reentrant ~= nil then check_string(opts.reentrant, 2, fname, "reentrant") end
  if opts.kind ~= nil and KIND_NUMBERS[opts.kind] == nil then
    argerror(2, fname, "kind must be \"exclusive\" or \"shared\"")
  end
  -- shared = true is kind = "shared", shared = false kind = "exclusive"; saying both, they must agree.
  local kind = opts.kind
  if opts.shared ~= nil then
    if type(opts.shared) ~= "boolean" then
      argerror(2, fname, "shared must be a boolean, got " .. type(opts.shared))
    end
    local said = opts.shared and "shared" or "exclusive"
    if kind ~= nil and kind ~= said then
      argerror(2, fname, "shared = " .. tostring(opts.shared) .. " contradicts kind = \""
        .. kind .. "\" (give one of them)")
    end
    kind = said
  end
  local permits = opts.permits
  if permits ~= nil and (type(permits) ~= "number" or permits % 1 ~= 0 or permits < 0
    or permits > 2^32 - 1) then
    argerror(2, fname, "permits must be an integer from 0 to 4294967295")
  end
  -- 0 goes to the library, whose "EINVAL" says why; 1 (the default) needs nothing of it.
  local take = opts.take
  if take ~= nil and (type(take) ~= "number" or take % 1 ~= 0 or take < 0 or take > 2^32 - 1) then
    argerror(2, fname, "take must be an integer from 0 to 4294967295 (0: the library says why not)")
  end
  if take == 1 then take = nil end
  if opts.fair ~= nil and type(opts.fair) ~= "boolean" then
    argerror(2, fname, "fair must be a boolean, got " .. type(opts.fair))
  end
  if opts.value ~= nil and type(opts.value) ~= "string" then
    argerror(2, fname, "value must be a string, got " .. type(opts.value))
  end
  local on_lost = opts.on_lost
  if on_lost ~= nil and type(on_lost) ~= "function" then
    local mt = getmetatable(on_lost)
    if not (mt and mt.__call) then argerror(2, fname, "on_lost must be a function") end
  end
  local on_release = opts.on_release_requested
  if on_release ~= nil and type(on_release) ~= "function" then
    local mt = getmetatable(on_release)
    if not (mt and mt.__call) then argerror(2, fname, "on_release_requested must be a function") end
  end
  for k in pairs(opts) do
    if k ~= "lease_ms" and k ~= "wait_ms" and k ~= "heartbeat_ms" and k ~= "retry_ms"
      and k ~= "owner" and k ~= "on_lost" and k ~= "kind" and k ~= "shared" and k ~= "permits"
      and k ~= "take" and k ~= "fair" and k ~= "value" and k ~= "max_hold_ms" and k ~= "min_hold_ms"
      and k ~= "lock_delay_ms" and k ~= "on_release_requested" and k ~= "reentrant" then
      argerror(2, fname, "unknown option '" .. tostring(k) .. "'")
    end
  end
  if on_release and not HAS_RELEASE_REQUEST then
    return false, fname .. ": libdlock " .. version .. " at " .. library_path .. " has no release "
      .. "requests (dlock_options_set_on_release_requested_queued) for on_release_requested; "
      .. "install a newer one", "EINVAL"
  end
  if opts.reentrant and not HAS_REENTRANT then
    return false, fname .. ": libdlock " .. version .. " at " .. library_path .. " has no "
      .. "reentrancy (dlock_options_set_reentrant) for reentrant; install a newer one", "EINVAL"
  end
  if take and not HAS_TAKE then
    return false, fname .. ": libdlock " .. version .. " at " .. library_path .. " cannot take "
      .. "several permits at once (dlock_options_set_take) for take; install a newer one", "EINVAL"
  end
  if max_hold and not HAS_MAX_HOLD then
    return false, fname .. ": libdlock " .. version .. " at " .. library_path .. " has no max hold "
      .. "(dlock_options_set_max_hold_ms) for max_hold_ms; install a newer one", "EINVAL"
  end
  if min_hold and not HAS_MIN_HOLD then
    return false, fname .. ": libdlock " .. version .. " at " .. library_path .. " has no min hold "
      .. "(dlock_options_set_min_hold_ms) for min_hold_ms; install a newer one", "EINVAL"
  end
  if lock_delay and not HAS_LOCK_DELAY then
    return false, fname .. ": libdlock " .. version .. " at " .. library_path .. " has no lock delay "
      .. "(dlock_options_set_lock_delay_ms) for lock_delay_ms; install a newer one", "EINVAL"
  end
  local o = C.dlock_options_new()
  if o == nil then raise("dlock: out of memory") end
  o = ffi.gc(o, C.dlock_options_free)
  local s = C.dlock_options_set_wait_ms(o, wait)
  if s == 0 and lease then s = C.dlock_options_set_lease_ms(o, lease) end
  if s == 0 and hb then s = C.dlock_options_set_heartbeat_ms(o, hb) end
  if s == 0 and max_hold then s = C.dlock_options_set_max_hold_ms(o, max_hold) end
  if s == 0 and min_hold then s = C.dlock_options_set_min_hold_ms(o, min_hold) end
  if s == 0 and lock_delay then s = C.dlock_options_set_lock_delay_ms(o, lock_delay) end
  if s == 0 and rmin then s = C.dlock_options_set_retry_ms(o, rmin, rmax) end
  if s == 0 and opts.owner then s = C.dlock_options_set_owner(o, opts.owner) end
  if s == 0 and opts.reentrant then s = C.dlock_options_set_reentrant(o, opts.reentrant) end
  if s == 0 and kind then s = C.dlock_options_set_kind(o, KIND_NUMBERS[kind]) end
  if s == 0 and permits then s = C.dlock_options_set_permits(o, permits) end
  if s == 0 and take then s = C.dlock_options_set_take(o, take) end
  if s == 0 and opts.fair ~= nil then s = C.dlock_options_set_fair(o, opts.fair and 1 or 0) end
  if s == 0 and opts.value ~= nil then s = C.dlock_options_set_value(o, opts.value, #opts.value) end
  if s ~= 0 then
    local _, msg, code = fail(s)
    C.dlock_options_free(ffi.gc(o, nil))
    return false, msg, code
  end
  return o, on_lost, wait, on_release
end

-- When on_release: makes the acquire's options o queue release requests, under a tag of their
-- own (the worker's queue under nginx, else the client's, made now), and returns that tag; or
-- nil, message, code (o is then freed).
local function listen_for_requests(self, o, on_release)
  if not on_release then return false end
  local q, tag
  if IN_NGX then
    local w = worker()
    w.next_tag = w.next_tag + 1
    q, tag = w.q, w.next_tag
    w.requested[tag] = PENDING
  else
    local msg, code
    q, msg, code = client_queue(self)
    if q == nil then
      C.dlock_options_free(ffi.gc(o, nil))
      return nil, msg, code
    end
    self._next_tag = self._next_tag + 1
    tag = self._next_tag
  end
  local s = C.dlock_options_set_on_release_requested_queued(o, q, tag)
  if s ~= 0 then
    if IN_NGX then W.requested[tag] = nil end
    C.dlock_options_free(ffi.gc(o, nil))
    return fail(s)
  end
  return tag
end

-- An acquire that listened under rtag (listen_for_requests) failed: forgets the tag.
local function forget_requests(rtag)
  if rtag and IN_NGX then W.requested[rtag], W.early[rtag] = nil, nil end
end

-- Wraps a held dlock_lock. tag: its DLOCK_QUEUE_LOST tag (yielding clients). rtag: the tag of
-- its release requests (listen_for_requests), with on_release, its on_release_requested.
local function new_lock(client, l, name, on_lost, tag, on_release, rtag)
  local lock = setmetatable({
    _h = ffi.gc(l, gc_lock),
    _client = client,
    _on_lost = on_lost,
    _on_release_requested = on_release,
    _token = C.dlock_lock_fencing_token(l),
    name = name,
  }, Lock)
  if on_lost then client._watched[lock] = true end
  if tag then W.watch[tag] = lock end
  if rtag then
    if IN_NGX then
      W.requested[rtag] = lock
      local early = W.early[rtag]
      W.early[rtag] = nil
      for _, reason in ipairs(early or {}) do report_release_requested(lock, reason) end
    else
      client._requested[rtag] = lock
    end
  end
  return lock
end

-- acquire through dlock_acquire_queued, waiting on a semaphore (nginx).
local function acquire_yielding(self, h, name, o, on_lost, wait, on_release, rtag)
  local w = W
  local tag, op = new_op(w, "acquire", name, true)
  -- Losses come through the queue too: reported by the worker's timer, never silently.
  local s = C.dlock_options_set_on_lost_queued(o, w.q, tag)
  if s == 0 then s = C.dlock_acquire_queued(h, name, o, w.q, tag) end
  C.dlock_options_free(ffi.gc(o, nil))
  if s ~= 0 then
    local _, msg, code = fail(s)
    forget_requests(rtag)
    return nil, msg, code
  end
  started(w, tag, op)
  local grace = self._bound + M.ngx_grace
  if not wait_op(w, op, wait >= 0 and wait / 1000 + grace or nil) then
    -- The library said nothing in time (it should have): cancel, and wait for that answer.
    if self._h ~= nil then C.dlock_acquire_cancel_queued(self._h, w.q, tag) end
    if not wait_op(w, op, grace) then
      op.abandoned = true  -- whatever comes later is given back
      forget_requests(rtag)
      return nil, "lock '" .. name .. "': no answer from the library within wait_ms + "
        .. grace .. " s", "EIO"
    end
  end
  if op.status ~= 0 then
    give_back(op)
    forget_requests(rtag)
    return op_failed(op)
  end
  return new_lock(self, op.lock, name, on_lost, tag, on_release, rtag)
end

-- Acquires the lock called name (1..MAX_NAME_BYTES bytes; any bytes but NUL), waiting for it
-- without limit unless opts.wait_ms bounds the wait. opts (all optional): lease_ms (default
--   10000; 0 = no expiry), wait_ms (-1 = no limit, default; N ms; 0 = one try), heartbeat_ms (default lease/3; 0 = none),
--   max_hold_ms (the longest the heartbeats keep the hold, 0 = none, the default: past it
--   renewals stop, the lock ends with its lease and is lost with the cause "max_hold"; with
--   lease_ms = 0 the acquire is "EINVAL"), min_hold_ms (the shortest the name stays taken
--   after the acquire, however the hold ends: an earlier release leaves it closed, inspect's
--   closed_by "min_hold"; 0 = none; at most max_hold_ms when that is set), lock_delay_ms (how
--   long the name stays closed after the lease runs out, closed_by "lock_delay"; a release has
--   no delay; 0 = none, at most MAX_LOCK_DELAY_MS; both need the backend's "min_hold" /
--   "lock_delay" capability, else "EINVAL"), retry_ms = { min, max } (default
--   {50, 1000}), owner (a label), reentrant (a context, 1..256 bytes: the request's id under
--   nginx, say; while this client holds the name under the same context, an acquire of it
--   re-enters at once, even with wait_ms = 0: a lock of its own on that hold, with the same
--   fencing token; only the release of the last of them frees the name; a re-entry of a lost
--   hold is "NOT_HELD", of another kind, permits or take "EINVAL"; another context, or none, contends;
--   "" is "EINVAL"), on_lost = function(lock) (see the note at the top),
--   on_release_requested = function(lock, reason) (the hold listens for client:request_release
--   while it holds; called where observer reports are: client:poll / client:dispatch, or under
--   nginx in a timer light thread; it may release the lock), kind =
--   "exclusive" (default) or "shared" (shared = true says the same), permits = n (a semaphore
--   of n holders; 0 = off), take = k (how many of the n permits this acquire takes at once, all
--   or none; default 1): the library refuses kinds the backend does not offer, a shared
--   semaphore, another n (or a lock kind) than the name's holders have, a take of 0, and one
--   above 1 without permits or above the permits, with "EINVAL";
--   fair = true (default: a waiting exclusive acquire takes a place in line and a release hands
--   it the lock, in arrival order, where the backend has the "fair" capability) or false (it
--   competes with every other waiter at each release), value (a string of any bytes, NUL
--   included, at most MAX_VALUE_BYTES: stored with the hold, shown by inspect and leader;
--   lock:set_value replaces it).
-- Returns the lock, or nil, message, code: "NOT_ACQUIRED" when someone else holds it and the
-- wait ran out (or, with wait_ms = 0, at once); "EINVAL" for values the library refuses (a name over 1024 bytes, ...).
-- Under nginx (a client opened without blocking = true) it waits without blocking the worker,
-- and raises in phases where a light thread cannot yield (init_worker, set, header_filter,
-- body_filter, log, balancer): there, use ngx.timer.at(0, fn).
local function acquire(self, name, opts, fname, campaign)
  check_string(name, 1, fname, "string")
  if self._pid then check_process(self) end
  if self._yield then yielding_phase("client:" .. fname) end
  self:poll()
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local o, on_lost, wait, on_release = build_options(opts, fname, campaign)
  if o == false then return nil, on_lost, wait end
  local rtag, msg, code = listen_for_requests(self, o, on_release)
  if rtag == nil then return nil, msg, code end
  rtag = rtag or nil  -- false: not listening
  -- A yielding campaign is a queued acquire whose wait has no limit (wait is -1 here).
  if self._yield then
    return acquire_yielding(self, h, name, o, on_lost, tonumber(wait), on_release, rtag)
  end
  local out = ffi.new("dlock_lock *[1]")
  local s = (campaign and C.dlock_campaign or C.dlock_acquire)(h, name, o, out)
  C.dlock_options_free(ffi.gc(o, nil))
  if s ~= 0 then
    local _, fmsg, fcode = fail(s)
    forget_requests(rtag)
    return nil, fmsg, fcode
  end
  return new_lock(self, out[0], name, on_lost, nil, on_release, rtag)
end

function Client:acquire(name, opts)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:acquire(name, opts)") end
  return acquire(self, name, opts, "acquire")
end

-- Stands for leader of the election name and waits, without limit, until this candidate leads
-- (dlock_campaign); returns the leadership, a lock whose fencing token is the term (greater
-- than every earlier term of the name), or nil, message, code. opts as for acquire but wait_ms,
-- kind, shared, permits and take (a leadership is exclusive and waits without limit: those raise):
-- value is what the leader proclaims (its address, say), shown by client:leader;
-- lock:set_value replaces it, lock:release resigns. Under nginx it yields while it waits.
function Client:campaign(name, opts)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:campaign(name, opts)") end
  return acquire(self, name, opts, "campaign", true)
end

-- ----- several names at once -------------------------------------------------------------------

-- Under nginx, the pause between two one-try attempts of a yielding acquire_many, in ms: jittered,
-- growing from the first to the second, unless opts.retry_ms gives the bounds.
M.ngx_many_retry_ms = { 20, 500 }

-- acquire_many under nginx (a yielding client): the library has no queued dlock_acquire_many, so
-- each attempt is one try of every name (wait_ms 0: the worker waits for those round trips, at
-- most one per name, as for break_lock), and the light thread sleeps (ngx.sleep, yielding) between attempts until wait
-- ms (-1: no limit) have passed. The status, and the message read right after the call.
local function acquire_many_yielding(self, c_names, n, o, wait, retry, out)
  local s = C.dlock_options_set_wait_ms(o, 0)
  if s ~= 0 then return s, ffi.string(C.dlock_last_error()) end
  ngx.update_time()
  local deadline = wait >= 0 and ngx.now() + wait / 1000 or nil
  local pause = retry[1]
  while true do
    local h = self._h
    if h == nil then return M.status.EINVAL, "client is closed" end
    s = C.dlock_acquire_many(h, c_names, n, o, out)
    if s == 0 then return s end
    local msg = ffi.string(C.dlock_last_error())  -- before a yield lets other calls reset it
    if s ~= M.status.NOT_ACQUIRED then return s, msg end
    ngx.update_time()
    local t = pause * (0.5 + 0.5 * math.random()) / 1000
    if deadline then
      local left = deadline - ngx.now()
      if left <= 0 then return s, msg end
      if t > left then t = left end
    end
    ngx.sleep(t)
    pause = math.min(pause * 2, retry[2])
  end
end

-- Acquires every name of names (an array of 1 or more strings, each as acquire's name), all or
-- none (dlock_acquire_many): a transfer between two accounts, a job that touches two shards.
-- Returns the group, an array whose [k] is the lock of names[k], each with its own fencing
-- token, lease, heartbeats and on_lost report (a loss of one name is reported as the loss of that
-- lock; the others stay held), with group:release() (dlock.release_many) to release them all;
-- or nil, message, code, with nothing held: "NOT_ACQUIRED" when a name was held elsewhere until
-- the wait ran out (the message names it), "EINVAL" for an empty array, a name given twice
-- (the message names it) and what acquire refuses. The names are taken in one fixed order
-- (bytewise), whatever order they are given in, so that callers asking for {a, b}
-- and {b, a} at once never wait on each other; what was taken is given back when a later name
-- cannot be. opts as for acquire (they apply to each name; wait_ms bounds the whole call) but
-- on_release_requested (raises: a request does not say which lock of the group it is for).
-- Under nginx (a yielding client) it makes one-try attempts with ngx.sleep between them
-- (dlock.ngx_many_retry_ms, or opts.retry_ms) until wait_ms has passed: the worker keeps
-- serving other requests while it waits, but not during an attempt's round trips (at most one
-- per name, as the library's blocking calls take); it raises in phases that cannot yield, like acquire.
function Client:acquire_many(names, opts)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:acquire_many(names, opts)") end
  local fname = "acquire_many"
  if type(names) ~= "table" then argerror(1, fname, "table of names expected, got " .. type(names)) end
  local n = #names
  local wanted = {}  -- the names, kept alive while the library reads them
  for k = 1, n do
    local v = names[k]
    if type(v) ~= "string" then argerror(1, fname, "names[" .. k .. "] must be a string, got " .. type(v)) end
    if v:find("\0", 1, true) then argerror(1, fname, "names[" .. k .. "] contains a NUL byte") end
    wanted[k] = v
  end
  if type(opts) == "table" and opts.on_release_requested ~= nil then
    argerror(2, fname, "acquire_many takes no option 'on_release_requested' (a request does not say "
      .. "which lock of the group it is for: acquire those names one by one)")
  end
  if self._pid then check_process(self) end
  if self._yield then yielding_phase("client:" .. fname) end
  self:poll()
  local h = self._h
  if h == nil then return nil, "client is closed", "EINVAL" end
  local o, on_lost, wait = build_options(opts, fname)
  if o == false then return nil, on_lost, wait end
  if not HAS_MANY then
    C.dlock_options_free(ffi.gc(o, nil))
    return nil, fname .. ": libdlock " .. version .. " at " .. library_path .. " cannot acquire "
      .. "several names at once (dlock_acquire_many); install a newer one", "EINVAL"
  end
  local c_names = ffi.new("const char *[?]", n + 1)
  for k = 1, n do c_names[k - 1] = wanted[k] end
  local out = ffi.new("dlock_lock *[?]", n + 1)
  local s, msg
  if self._yield then
    local retry = M.ngx_many_retry_ms
    if type(opts) == "table" and opts.retry_ms ~= nil then
      retry = { tonumber(opts.retry_ms[1]), tonumber(opts.retry_ms[2]) }
    end
    s, msg = acquire_many_yielding(self, c_names, n, o, tonumber(wait), retry, out)
  else
    s = C.dlock_acquire_many(h, c_names, n, o, out)
    if s ~= 0 then msg = ffi.string(C.dlock_last_error()) end
  end
  C.dlock_options_free(ffi.gc(o, nil))
  if s ~= 0 then
    local code = M.code(s)
    return nil, (msg ~= nil and msg ~= "") and msg or "DLOCK_" .. code, code
  end
  local group = {}
  for k = 1, n do
    local lock = new_lock(self, out[k - 1], wanted[k], on_lost)
    -- Under nginx a loss is never silent: the worker's timer finds it (client:poll) and calls
    -- on_lost, or says so in the error log.
    if IN_NGX then self._watched[lock] = true end
    group[k] = lock
  end
  return setmetatable(group, Group)
end

-- Calls on_lost(lock) for every lock of this client that stopped being valid (found lost by a
-- heartbeat, taken over, or past its local deadline) without being released. Each at most
-- once. Outside nginx it first delivers the observer reports and release requests waiting (see
-- client:observe, on_release_requested), without waiting for any. Returns how many calls it
-- made. Cheap: call it from a timer. Under nginx the worker's timer calls it every
-- dlock.ngx_interval seconds (0.1).
function Client:poll()
  local n = 0
  if IN_NGX then
    if self._yield and W then drain() end
  else
    close_forgotten()
    if self._q ~= nil then n = deliver_reports(self) end
  end
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
      if report_lost(lock) then n = n + 1 end
    end
  end
  return n
end

-- Acquires name (opts as for acquire), calls fn(lock), and releases the lock whatever fn did:
-- returned, raised, or released it itself. Returns true and fn's results when the lock was held
-- until fn returned; nil, message, code when it was not acquired (fn not called), or when the
-- release says it had been lost meanwhile ("NOT_HELD": fn ran, but not all of it under the
-- lock). An error raised by fn is raised again, unchanged, after the release.
local function pack(...) return { n = select("#", ...), ... } end

function Client:run(name, opts, fn)
  if getmetatable(self) ~= Client then raise("dlock: call it as client:run(name, opts, fn)") end
  if type(fn) ~= "function" then
    local mt = getmetatable(fn)
    if not (mt and mt.__call) then argerror(3, "run", "function expected, got " .. type(fn)) end
  end
  local lock, msg, code = acquire(self, name, opts, "run")
  if not lock then return nil, msg, code end
  local results = pack(pcall(fn, lock))
  local released, rmsg, rcode = true, nil, nil
  if not lock:released() then released, rmsg, rcode = lock:release() end
  if not results[1] then error(results[2], 0) end
  if not released then return nil, rmsg, rcode end
  return unpack(results, 1, results.n)
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

-- Why the lock is no longer valid: nil while it is held and valid (or once released), else
-- "CAUSE: details". When the server no longer had this owner's lock (a renewal, extend, release
-- or set_value was refused), the library looks at the name once more: CAUSE "deleted" (nobody
-- holds it: deleted, or its lease ran out on the server; or a shared or semaphore hold vanished
-- while others stand), "taken_over" (another owner holds it: "another owner holds it now
-- (fencing token N, label 'x')") or "refused" (that look failed, or still listed this hold).
-- "expired": renewals failed until the local deadline passed first. "max_hold": max_hold_ms
-- passed, renewals stopped, and the lease ran out. Read it before release.
function Lock:lost_cause()
  local h = self._h
  if h == nil then return nil end
  local cause = C.dlock_lock_lost_cause(h)
  return cause ~= nil and ffi.string(cause) or nil
end

-- Waits (yielding) for the outcome of lock's queued extend, set_value or release, op: true, or nil,
-- message, code. Gives up past the library's own bound (see ngx_grace) with "EIO".
local function lock_op_outcome(lock, w, op)
  local grace = lock._client._bound + M.ngx_grace
  if not wait_op(w, op, grace) then
    op.abandoned = true
    return nil, "lock '" .. lock.name .. "': no answer to " .. op.what .. " within " .. grace
      .. " s", "EIO"
  end
  if op.status ~= 0 then return op_failed(op) end
  return true
end

-- Sets the lease to lease_ms from now (0 = no expiry). true, or nil, message, code
-- ("NOT_HELD" when it was lost or released). Under nginx it yields while it waits (and raises
-- in phases that cannot yield, like acquire).
function Lock:extend(lease_ms)
  if getmetatable(self) ~= Lock then raise("dlock: call it as lock:extend(lease_ms)") end
  check_ms(lease_ms, 1, "extend", "lease_ms", 0, 2^53)
  local client = self._client
  if client._pid then check_process(client) end
  if client._yield then yielding_phase("lock:extend") end
  local h = self._h
  if h == nil then return nil, "lock '" .. self.name .. "' was already released", "NOT_HELD" end
  if not client._yield then
    local s = C.dlock_extend(h, lease_ms)
    if s ~= 0 then return fail(s) end
    return true
  end
  local w = W
  local tag, op = new_op(w, "extend", self.name, true)
  local s = C.dlock_extend_queued(h, lease_ms, w.q, tag)
  if s ~= 0 then return fail(s) end
  started(w, tag, op)
  return lock_op_outcome(self, w, op)
end

-- Replaces the value stored with the hold (a string of any bytes; "" removes it) if this owner
-- still holds it: true, or nil, message, code ("NOT_HELD" when it was lost, taken over or
-- released: nothing is written then; "EINVAL" for more than MAX_VALUE_BYTES). The lease is left
-- as it is. One round trip. Under nginx it yields while it waits (and raises in phases that
-- cannot yield, like extend).
function Lock:set_value(value)
  if getmetatable(self) ~= Lock then raise("dlock: call it as lock:set_value(value)") end
  if type(value) ~= "string" then argerror(1, "set_value", "string expected, got " .. type(value)) end
  local client = self._client
  if client._pid then check_process(client) end
  if client._yield then yielding_phase("lock:set_value") end
  local h = self._h
  if h == nil then return nil, "lock '" .. self.name .. "' was already released", "NOT_HELD" end
  if not client._yield then
    local s = C.dlock_lock_set_value(h, value, #value)
    if s ~= 0 then return fail(s) end
    return true
  end
  local w = W
  local tag, op = new_op(w, "set_value", self.name, true)
  local s = C.dlock_lock_set_value_queued(h, value, #value, w.q, tag)  -- copies the value
  if s ~= 0 then return fail(s) end
  started(w, tag, op)
  return lock_op_outcome(self, w, op)
end

-- Releases the lock: true, or nil, message, code ("NOT_HELD" when it had been lost or was
-- already released). The handle is gone either way. Under nginx it yields while it waits; in a
-- phase that cannot yield (log_by_lua*, ...) it starts the release, returns true at once, and
-- a failure is written to nginx's error log.
function Lock:release()
  local h = self._h
  if h == nil then return nil, "lock '" .. self.name .. "' was already released", "NOT_HELD" end
  local client = self._client
  if client._pid then check_process(client) end
  local can_wait = client._yield and yielding_phase("lock:release", true)
  self._h = nil
  ffi.gc(h, nil)
  if not client._yield then
    local s = C.dlock_release(h)
    if s ~= 0 then return fail(s) end
    return true
  end
  local w = W
  local tag, op = new_op(w, "release", self.name, can_wait)
  local s = C.dlock_release_queued(h, w.q, tag)  -- frees h, whatever comes of it
  if s ~= 0 then return fail(s) end
  started(w, tag, op)
  if not can_wait then return true end
  return lock_op_outcome(self, w, op)
end

function Lock:__tostring()
  local state = self._h == nil and "released" or (self:valid() and "held" or "lost")
  return string.format("dlock.lock(%q, token=%s, %s)", self.name, self:fencing_token_string(), state)
end

-- ----- releasing several locks at once ----------------------------------------------------------

-- The outcome of several releases, as dlock_release_many gives it: true when every one was;
-- else nil, every failure's message ("; " between them), and the code of the first failure that
-- is not "NOT_HELD", or "NOT_HELD" when all were losses. failures: { { msg, code }, ... }.
local function merge_failures(failures)
  if failures[1] == nil then return true end
  local first, msgs = nil, {}
  for i, f in ipairs(failures) do
    if first == nil or (first[2] == "NOT_HELD" and f[2] ~= "NOT_HELD") then first = f end
    msgs[i] = f[1]
  end
  return nil, table.concat(msgs, "; "), first[2]
end

-- Releases every lock of locks (an array: a group from client:acquire_many, or any locks) that
-- is not yet released, each through its own client (dlock_release_many): true, or nil, message,
-- code: "NOT_HELD" when some hold had been lost (the message names each lost lock: "lock 'a' was
-- lost: ..."; "; " between them), and the others are released all the same; the first other
-- failure's code when there was one ("EIO", ...), its message naming every failure. Locks
-- already released are skipped; when all were, nil, message, "NOT_HELD", as lock:release
-- says again. Under nginx the locks of a yielding client are released as lock:release does them
-- (all at once, yielding while it waits; in a phase that cannot yield, started and true at once).
function M.release_many(locks)
  if type(locks) ~= "table" then argerror(1, "release_many", "table of locks expected, got " .. type(locks)) end
  local n = #locks
  for k = 1, n do
    if getmetatable(locks[k]) ~= Lock then
      argerror(1, "release_many", "locks[" .. k .. "] is not a lock (got " .. type(locks[k]) .. ")")
    end
  end
  local blocking, queued, names = {}, {}, {}
  for k = 1, n do
    local lock = locks[k]
    if lock._h ~= nil then
      local client = lock._client
      if client._pid then check_process(client) end
      if client._yield then queued[#queued + 1] = lock else blocking[#blocking + 1] = lock end
    end
    names[#names + 1] = "'" .. lock.name .. "'"
  end
  if blocking[1] == nil and queued[1] == nil then
    if n == 0 then return true end
    return nil, (n == 1 and "lock " or "locks ") .. table.concat(names, ", ")
      .. (n == 1 and " was" or " were") .. " already released", "NOT_HELD"
  end
  local failures = {}
  if blocking[1] ~= nil then
    local handles = ffi.new("dlock_lock *[?]", #blocking)
    for i, lock in ipairs(blocking) do
      local h = lock._h
      lock._h = nil
      ffi.gc(h, nil)
      handles[i - 1] = h
    end
    local s
    if HAS_MANY then
      s = C.dlock_release_many(handles, #blocking)
      if s ~= 0 then
        local _, msg, code = fail(s)
        failures[1] = { msg, code }
      end
    else  -- a library from before dlock_release_many: one by one
      for i = 0, #blocking - 1 do
        s = C.dlock_release(handles[i])
        if s ~= 0 then
          local _, msg, code = fail(s)
          failures[#failures + 1] = { msg, code }
        end
      end
    end
  end
  if queued[1] ~= nil then
    local can_wait = yielding_phase("dlock.release_many", true)
    local w = W
    local started_ops = {}
    for _, lock in ipairs(queued) do
      local h = lock._h
      lock._h = nil
      ffi.gc(h, nil)
      local tag, op = new_op(w, "release", lock.name, can_wait)
      local s = C.dlock_release_queued(h, w.q, tag)  -- frees h, whatever comes of it
      if s ~= 0 then
        local _, msg, code = fail(s)
        failures[#failures + 1] = { msg, code }
      else
        started(w, tag, op)
        started_ops[#started_ops + 1] = { lock, op }
      end
    end
    if can_wait then
      for _, p in ipairs(started_ops) do
        local ok, msg, code = lock_op_outcome(p[1], w, p[2])
        if not ok then failures[#failures + 1] = { msg, code } end
      end
    end
  end
  return merge_failures(failures)
end

-- The group's locks: group[k] is the lock of names[k] (#group of them).
-- group:release(): dlock.release_many(group) (see above).
function Group:release()
  if getmetatable(self) ~= Group then raise("dlock: call it as group:release()") end
  return M.release_many(self)
end

-- true once every lock of the group is released.
function Group:released()
  for k = 1, #self do
    if self[k]._h ~= nil then return false end
  end
  return true
end

-- true while every lock of the group is held and valid (see lock:valid()).
function Group:valid()
  if self[1] == nil then return false end
  for k = 1, #self do
    if not self[k]:valid() then return false end
  end
  return true
end

function Group:__tostring()
  local parts = {}
  for k = 1, #self do parts[k] = tostring(self[k]) end
  return "dlock.group(" .. table.concat(parts, ", ") .. ")"
end

M.Client, M.Lock, M.Observer, M.Group = Client, Lock, Observer, Group
return M
