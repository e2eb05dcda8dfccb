# The Redis backends (redis://, redis+unix://, redis-cluster://, redis-sentinel://, redlock://),
# in layers: wire/ (connections over hiredis's reply reader and command formatter, blocking and
# on the loop's streams, TLS, replies, scripts, slots, the key layout), topology/ (one node, a
# cluster, a Sentinel-followed master, the subscriber, the channel they share), and here the lock
# operations written once over a channel, the URLs and the backends.
# Included by the top-level CMakeLists.txt right after dlock_core exists.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(LIBEVENT_OPENSSL REQUIRED IMPORTED_TARGET libevent_openssl)

# lua/*.lua is the source of truth, embedded into the library at build time.
set(DLOCK_LUA_SCRIPTS ${PROJECT_SOURCE_DIR}/lua/acquire.lua
                      ${PROJECT_SOURCE_DIR}/lua/release.lua
                      ${PROJECT_SOURCE_DIR}/lua/extend.lua
                      ${PROJECT_SOURCE_DIR}/lua/inspect.lua
                      ${PROJECT_SOURCE_DIR}/lua/fence.lua
                      ${PROJECT_SOURCE_DIR}/lua/set_value.lua
                      ${PROJECT_SOURCE_DIR}/lua/break.lua
                      ${PROJECT_SOURCE_DIR}/lua/request_release.lua
                      ${PROJECT_SOURCE_DIR}/lua/acquire_many.lua
                      ${PROJECT_SOURCE_DIR}/lua/release_many.lua)
set(DLOCK_LUA_GEN ${PROJECT_BINARY_DIR}/generated/lua_scripts.cc)
add_custom_command(
  OUTPUT ${DLOCK_LUA_GEN}
  COMMAND ${CMAKE_COMMAND} -DOUT=${DLOCK_LUA_GEN} "-DSCRIPTS=$<JOIN:${DLOCK_LUA_SCRIPTS},|>"
          -P ${PROJECT_SOURCE_DIR}/cmake/embed_lua.cmake
  DEPENDS ${DLOCK_LUA_SCRIPTS} ${PROJECT_SOURCE_DIR}/cmake/embed_lua.cmake
  COMMENT "Embedding Lua scripts" VERBATIM)

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/wire/async_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/topology/cluster_channel.cc
  ${CMAKE_CURRENT_LIST_DIR}/topology/cluster_map.cc
  ${CMAKE_CURRENT_LIST_DIR}/wire/key_slot.cc
  ${CMAKE_CURRENT_LIST_DIR}/lock_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/topology/node_channel.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/redlock_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_url.cc
  ${CMAKE_CURRENT_LIST_DIR}/wire/reply.cc
  ${CMAKE_CURRENT_LIST_DIR}/wire/scripts.cc
  ${CMAKE_CURRENT_LIST_DIR}/wire/stream_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/topology/sentinel_channel.cc
  ${CMAKE_CURRENT_LIST_DIR}/topology/subscriber.cc
  ${CMAKE_CURRENT_LIST_DIR}/wire/sync_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/wire/tls.cc
  ${CMAKE_CURRENT_LIST_DIR}/topology/watch_router.cc
  ${DLOCK_LUA_GEN})
target_link_libraries(dlock_core PUBLIC PkgConfig::HIREDIS OpenSSL::SSL PkgConfig::LIBEVENT_OPENSSL)
