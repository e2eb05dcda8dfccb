# The Redis backends (redis://, redis+unix://, redis-cluster://, redis-sentinel://, redlock://): hiredis's reply reader and command formatter,
# our own socket I/O (blocking, and on libevent bufferevents on the loop; OpenSSL for TLS), and
# the Lua scripts.
# Included by the top-level CMakeLists.txt right after dlock_core exists.
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
pkg_check_modules(LIBEVENT_OPENSSL REQUIRED IMPORTED_TARGET libevent_openssl)

# lua/*.lua is the source of truth, embedded into the library at build time.
set(DLOCK_LUA_SCRIPTS ${PROJECT_SOURCE_DIR}/lua/acquire.lua
                      ${PROJECT_SOURCE_DIR}/lua/release.lua
                      ${PROJECT_SOURCE_DIR}/lua/extend.lua
                      ${PROJECT_SOURCE_DIR}/lua/inspect.lua
                      ${PROJECT_SOURCE_DIR}/lua/fence.lua)
set(DLOCK_LUA_GEN ${PROJECT_BINARY_DIR}/generated/lua_scripts.cc)
add_custom_command(
  OUTPUT ${DLOCK_LUA_GEN}
  COMMAND ${CMAKE_COMMAND} -DOUT=${DLOCK_LUA_GEN} "-DSCRIPTS=$<JOIN:${DLOCK_LUA_SCRIPTS},|>"
          -P ${PROJECT_SOURCE_DIR}/cmake/embed_lua.cmake
  DEPENDS ${DLOCK_LUA_SCRIPTS} ${PROJECT_SOURCE_DIR}/cmake/embed_lua.cmake
  COMMENT "Embedding Lua scripts" VERBATIM)

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/async_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/cluster_channel.cc
  ${CMAKE_CURRENT_LIST_DIR}/cluster_map.cc
  ${CMAKE_CURRENT_LIST_DIR}/key_slot.cc
  ${CMAKE_CURRENT_LIST_DIR}/lock_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/node_channel.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/redlock_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/redis_url.cc
  ${CMAKE_CURRENT_LIST_DIR}/reply.cc
  ${CMAKE_CURRENT_LIST_DIR}/scripts.cc
  ${CMAKE_CURRENT_LIST_DIR}/stream_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/sentinel_channel.cc
  ${CMAKE_CURRENT_LIST_DIR}/subscriber.cc
  ${CMAKE_CURRENT_LIST_DIR}/sync_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/tls.cc
  ${CMAKE_CURRENT_LIST_DIR}/watch_router.cc
  ${DLOCK_LUA_GEN})
target_link_libraries(dlock_core PUBLIC PkgConfig::HIREDIS OpenSSL::SSL PkgConfig::LIBEVENT_OPENSSL)
