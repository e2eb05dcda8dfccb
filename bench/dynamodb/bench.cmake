# dlock_ddb_bench: the DynamoDB benchmark's C++ side (bench/dynamodb/run drives it). It links
# the core's objects: besides the C ABI it times the protocol's local work through internals.
if(NOT TARGET dlock_ddb_bench)
  add_executable(dlock_ddb_bench ${CMAKE_CURRENT_LIST_DIR}/ddb_bench.cc)
  target_link_libraries(dlock_ddb_bench PRIVATE dlock_core)
endif()
