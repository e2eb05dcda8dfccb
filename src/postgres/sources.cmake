# The PostgreSQL backend (postgres:// and postgresql:// URLs), issue 40: being built. So far its
# URL (postgres_config.h), its protocol as SQL (schema.sql, tested in tests/postgres_schema_test.cc)
# and its connection on the loop (connection.h, over libpq's asynchronous API). Until the backend
# that puts them together is registered (src/backends/registry.cc), they are a static library of
# their own that only the tests link, beside dlock_core: libdlock.so does not link libpq yet, so
# the packages and the bindings' bundled library need nothing more from the system.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)

add_library(dlock_postgres STATIC
  ${CMAKE_CURRENT_LIST_DIR}/connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/postgres_config.cc)
# dlock_core's headers and dependencies, not its objects (the tests link those themselves).
target_include_directories(dlock_postgres PUBLIC $<TARGET_PROPERTY:dlock_core,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_definitions(dlock_postgres PRIVATE DLOCK_BUILDING)
target_link_libraries(dlock_postgres PUBLIC PkgConfig::LIBPQ $<TARGET_PROPERTY:dlock_core,INTERFACE_LINK_LIBRARIES>)
