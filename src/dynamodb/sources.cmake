# The DynamoDB backend (dynamodb:// URLs): SigV4, the AWS credentials chain and the lock
# protocol, over src/http (libcurl). Included by the top-level CMakeLists.txt right after
# dlock_core exists and src/http/sources.cmake; the shared library links what dlock_core's
# interface names.
find_package(nlohmann_json 3.2 REQUIRED)

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/aws_profile.cc
  ${CMAKE_CURRENT_LIST_DIR}/create_table.cc
  ${CMAKE_CURRENT_LIST_DIR}/credentials.cc
  ${CMAKE_CURRENT_LIST_DIR}/dynamodb_api.cc
  ${CMAKE_CURRENT_LIST_DIR}/dynamodb_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/dynamodb_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/lock_protocol.cc
  ${CMAKE_CURRENT_LIST_DIR}/sigv4.cc
  ${CMAKE_CURRENT_LIST_DIR}/transports.cc)
target_link_libraries(dlock_core PUBLIC nlohmann_json::nlohmann_json)
