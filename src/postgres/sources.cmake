# The PostgreSQL backend (postgres:// and postgresql:// URLs), issue 40: being built. So far its
# URL (postgres_config.h), its protocol as SQL (schema.sql, tested in tests/postgres_schema_test.cc)
# and its connection on the loop (connection.h, over libpq's asynchronous API); the backend that
# puts them together, and its line in src/backends/registry.cc, come next.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/postgres_config.cc)
target_link_libraries(dlock_core PUBLIC PkgConfig::LIBPQ)
