# The PostgreSQL backend (postgres:// and postgresql:// URLs), issue 40: being built. So far its
# URL (postgres_config.h); the lock protocol over libpq's asynchronous API comes next, and only
# then its line in src/backends/registry.cc.
target_sources(dlock_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/postgres_config.cc)
