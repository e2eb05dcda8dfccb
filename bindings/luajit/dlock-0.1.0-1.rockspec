-- LuaRocks package of the LuaJIT binding: one module, dlock.lua, over libdlock.so, which it
-- does not carry: install the library first (Debian package libdlock0, or a build; see
-- README.md, "Install"). The module needs LuaJIT (plain, or OpenResty's): it uses the FFI.
--
--   luarocks make dlock-0.1.0-1.rockspec          (from this directory, in a clone)
rockspec_format = "3.0"
package = "dlock"
version = "0.1.0-1"
source = {
  -- The project's repository; a clone's `luarocks make` does not fetch it.
  url = "git+https://example.invalid/dlock.git",
  tag = "v0.1.0",
  dir = "dlock/bindings/luajit",
}
description = {
  summary = "Distributed locks with fencing tokens and lease heartbeats (LuaJIT FFI over libdlock)",
  detailed = [[
    Locks held on Redis (one server, Cluster, Sentinel, Redlock), DynamoDB or etcd, with fencing
    tokens, leases renewed in the background, waiting that sleeps until the holder releases, and
    lost-lock reports. Under OpenResty (ngx_lua), waits yield: the nginx worker keeps serving.
  ]],
  license = "MIT",
  labels = { "lock", "mutex", "redis", "distributed", "openresty", "ffi" },
}
supported_platforms = { "linux" }
dependencies = {
  "lua == 5.1",  -- LuaJIT reports 5.1; the module checks for the FFI itself
}
build = {
  type = "builtin",
  modules = {
    dlock = "dlock.lua",
  },
}
