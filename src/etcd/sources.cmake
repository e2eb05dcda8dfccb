# The etcd backend (etcd:// URLs): etcd v3 through its JSON gateway, over src/http (libcurl).
# Included by the top-level CMakeLists.txt right after dlock_core exists and
# src/http/sources.cmake.
find_package(nlohmann_json 3.2 REQUIRED)
find_package(OpenSSL REQUIRED)  # base64

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/etcd_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/etcd_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/gateway.cc
  ${CMAKE_CURRENT_LIST_DIR}/lock_protocol.cc
  ${CMAKE_CURRENT_LIST_DIR}/mutex_layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/transport.cc
  ${CMAKE_CURRENT_LIST_DIR}/watches.cc)
target_link_libraries(dlock_core PUBLIC nlohmann_json::nlohmann_json OpenSSL::Crypto)
