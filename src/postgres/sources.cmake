# The PostgreSQL backend (postgres:// and postgresql:// URLs): libpq's asynchronous API on the
# loop (connection.h), a blocking pool for callers' threads (blocking_session.h), the protocol as
# SQL functions on a lock table (schema.sql, embedded at build time) called once over either
# (lock_protocol.h). Included by the top-level CMakeLists.txt right after dlock_core exists.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)

set(DLOCK_SCHEMA_GEN ${PROJECT_BINARY_DIR}/generated/postgres_schema.cc)
add_custom_command(
  OUTPUT ${DLOCK_SCHEMA_GEN}
  COMMAND ${CMAKE_COMMAND} -DIN=${CMAKE_CURRENT_LIST_DIR}/schema.sql -DOUT=${DLOCK_SCHEMA_GEN}
          -DNAMESPACE=dlock::postgres -DSYMBOL=kSchemaSql -P ${PROJECT_SOURCE_DIR}/cmake/embed_text.cmake
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/schema.sql ${PROJECT_SOURCE_DIR}/cmake/embed_text.cmake
  COMMENT "Embedding the PostgreSQL schema" VERBATIM)

target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/blocking_session.cc
  ${CMAKE_CURRENT_LIST_DIR}/connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/lock_protocol.cc
  ${CMAKE_CURRENT_LIST_DIR}/postgres_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/postgres_config.cc
  ${CMAKE_CURRENT_LIST_DIR}/session.cc
  ${DLOCK_SCHEMA_GEN})
target_link_libraries(dlock_core PUBLIC PkgConfig::LIBPQ)
