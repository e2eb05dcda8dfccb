# Debian packages, one per install component (scripts/package runs cpack):
#   libdlock0     (runtime) the shared library and its Lua scripts
#   libdlock-dev  (dev)     headers, libdlock.so, dlock.pc, the CMake package
#   dlock-tools   (tools)   the dlock command and its man page
# Runtime Depends come from dpkg-shlibdeps (libhiredis0.14, libevent, libssl3, libcurl4, ...).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "dlock developers <dlock@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed locks with fencing tokens and lease heartbeats")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
if(DLOCK_BUILD_CLI)
  list(APPEND CPACK_COMPONENTS_ALL tools)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dlock-tools links libdlock.so.0 from this build, which no installed package provides yet.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # a shlibs file and the ldconfig trigger
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(dlock_same_version "libdlock0 (= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libdlock0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "distributed locks with fencing tokens and lease heartbeats (library)\n\
libdlock is a C library of distributed locks over Redis (one server, TLS,\n\
Cluster, Sentinel), DynamoDB and etcd: exclusive, shared and counting-semaphore\n\
locks, fencing tokens, leases renewed in the background, lost locks reported.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdlock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${dlock_same_version}")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "distributed locks with fencing tokens and lease heartbeats (development files)\n\
Headers (dlock/dlock.h, the C++ wrapper dlock/dlock.hpp), the libdlock.so link,\n\
the pkg-config file dlock.pc and the CMake package (find_package(dlock)).")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME dlock-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${dlock_same_version}")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "run commands under a distributed lock (dlock exec NAME -- CMD)\n\
The dlock command: flock(1) for a fleet. It runs a command while holding a lock\n\
kept by Redis, DynamoDB or etcd, hands it a fencing token, and stops it when the\n\
lock is lost. Also hold, inspect and prepare.")

# Each package's copyright file, as Debian policy asks.
foreach(pair "runtime;libdlock0" "dev;libdlock-dev" "tools;dlock-tools")
  list(GET pair 0 component)
  list(GET pair 1 package)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
          RENAME copyright COMPONENT ${component})
endforeach()

include(CPack)
