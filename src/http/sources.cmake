# HTTP over libcurl, shared by the backends that speak it (DynamoDB, etcd): the easy-handle
# pool for blocking requests, curl multi on the client's loop for async requests and streamed
# bodies. Included by the top-level CMakeLists.txt with each backend that speaks HTTP, once
# dlock_core exists: the guard adds the sources once however many include it.
include_guard(GLOBAL)
pkg_check_modules(LIBCURL REQUIRED IMPORTED_TARGET libcurl)

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/async_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/blocking_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/cloexec.cc
  ${CMAKE_CURRENT_LIST_DIR}/easy_transfer.cc
  ${CMAKE_CURRENT_LIST_DIR}/multi_on_loop.cc)
target_link_libraries(dlock_core PUBLIC PkgConfig::LIBCURL)
