# The DynamoDB backend (dynamodb:// URLs): SigV4 over libcurl, the AWS credentials chain and
# the lock protocol. Included by the top-level CMakeLists.txt right after dlock_core exists;
# the shared library links what dlock_core's interface names.
find_package(nlohmann_json 3.2 REQUIRED)
pkg_check_modules(LIBCURL REQUIRED IMPORTED_TARGET libcurl)

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/aws_profile.cc
  ${CMAKE_CURRENT_LIST_DIR}/create_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/credentials.cc
  ${CMAKE_CURRENT_LIST_DIR}/curl_multi.cc
  ${CMAKE_CURRENT_LIST_DIR}/dynamodb_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/dynamodb_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/dynamodb_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/http.cc
  ${CMAKE_CURRENT_LIST_DIR}/lock_protocol.cc
  ${CMAKE_CURRENT_LIST_DIR}/sigv4.cc
  ${CMAKE_CURRENT_LIST_DIR}/transports.cc)
target_link_libraries(dlock_core PUBLIC PkgConfig::LIBCURL nlohmann_json::nlohmann_json)
