# Debian packages, one per install component (cpack -G DEB; scripts/package runs it):
#   libdlock0     runtime  the shared library and its Lua scripts
#   libdlock-dev  dev      headers, the libdlock.so link, dlock.pc, the CMake package
#   dlock-tools   tools    bin/dlock and its man page (cli/, when built)
#
# This file is read twice: by CMakeLists.txt (last line) to set CPack up, and by cpack itself
# as a CPACK_PRE_BUILD_SCRIPTS script, to finish the staged trees the way Debian wants them
# (copyright, changelog, compressed man pages): the install rules stay plain for everyone else.

if(NOT CPACK_TEMPORARY_DIRECTORY) # --- configure time, from CMakeLists.txt --------------------

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "The dlock authors <maintainers@users.noreply.a-seed-dd7a64b6.example>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON) # lintian: unstripped-binary-or-object (no -dbgsym packages)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS # 0755 whatever the umask
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # <package>_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

# Depends from dpkg-shlibdeps; bin/dlock's libdlock.so.0 is resolved from this build tree.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})

set(_dlock_runtime_dep "libdlock0 (= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libdlock0) # the SONAME, libdlock.so.0
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# A shlibs file ("libdlock 0 libdlock0 (>= 0.1.0)"): what packages linking libdlock depend on.
# (Global in CPack; only libdlock0 holds a shared object.)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# dpkg's ldconfig trigger (lintian: lacks-ldconfig-trigger). CPack also writes postinst/postrm
# calling ldconfig, now redundant (lintian warns: maintscript-calls-ldconfig); harmless.
file(WRITE ${PROJECT_BINARY_DIR}/deb/triggers "activate-noawait ldconfig\n")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/deb/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "distributed locks with fencing tokens (shared library)
dlock is a distributed lock library: a C++20 core behind a small, stable C ABI,
with fencing tokens, leases renewed in the background, waiters woken by the
release itself, and lost locks that are always reported. Backends: Redis (one
server, TLS, Cluster, Sentinel), etcd and DynamoDB.

This package holds the shared library and the Lua scripts it runs on Redis.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libdlock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# Plus the -dev package of each module dlock.pc's Requires/Requires.private names: none today
# (its dependencies are private and the headers include none of theirs); scripts/check_packages
# fails if that changes without this list following.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_dlock_runtime_dep}")
set(CPACK_DEBIAN_DEV_DESCRIPTION "distributed locks with fencing tokens (development files)
dlock is a distributed lock library: a C++20 core behind a small, stable C ABI,
with fencing tokens, leases renewed in the background and lost locks that are
always reported.

This package holds the C header, the header-only C++ layer, the libdlock.so
link, the pkg-config file (dlock.pc) and the CMake package (dlock::dlock).")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME dlock-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "${_dlock_runtime_dep}")
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "distributed locks with fencing tokens (command-line tool)
dlock is a distributed lock library with fencing tokens and leases renewed in
the background, over Redis, etcd and DynamoDB.

This package holds the dlock command, which takes, inspects and releases
locks from the shell.")

# Read back by cpack (below), which knows nothing of this project.
set(CPACK_DLOCK_SOURCE_DIR ${PROJECT_SOURCE_DIR})
# The library lands in the build's CMAKE_INSTALL_LIBDIR under /usr: lib/ for the normal build
# that scripts/package reuses (the run's 30-minute budget has no room for a second library
# build), lib/<multiarch> for a build dir configured with -DCMAKE_INSTALL_PREFIX=/usr.
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_CURRENT_LIST_FILE})

include(CPack)

else() # --- cpack time: CPACK_TEMPORARY_DIRECTORY holds one staged tree per component ---------

string(TIMESTAMP _date "%a, %d %b %Y %H:%M:%S +0000" UTC) # honours SOURCE_DATE_EPOCH
foreach(_component IN LISTS CPACK_COMPONENTS_ALL) # tools only when cli/ is built
  string(TOUPPER ${_component} _upper)
  set(_package ${CPACK_DEBIAN_${_upper}_PACKAGE_NAME})
  set(_root "${CPACK_TEMPORARY_DIRECTORY}/${_component}")
  set(_usr "${_root}${CPACK_PACKAGING_INSTALL_PREFIX}")
  set(_doc "${_usr}/share/doc/${_package}")
  # Debian policy 12.5: the licence as /usr/share/doc/<package>/copyright, in every package;
  # the LICENSE the runtime component installs for plain installs would be a second copy.
  file(REMOVE_RECURSE "${_usr}/share/doc/dlock")
  file(MAKE_DIRECTORY "${_doc}")
  file(COPY_FILE "${CPACK_DLOCK_SOURCE_DIR}/LICENSE" "${_doc}/copyright")
  # Policy 12.7: a changelog (native version, so changelog.gz), compressed with gzip -9n.
  file(WRITE "${_doc}/changelog" "dlock (${CPACK_PACKAGE_VERSION}) unstable; urgency=medium

  * Built with CPack from the dlock source tree.

 -- ${CPACK_PACKAGE_CONTACT}  ${_date}
")
  file(GLOB_RECURSE _gz "${_doc}/changelog" "${_usr}/share/man/*.[1-9]")
  foreach(_f IN LISTS _gz)
    execute_process(COMMAND gzip -9nf "${_f}" COMMAND_ERROR_IS_FATAL ANY)
  endforeach()
  # What this script made: 0644 files, 0755 directories, whatever the umask.
  file(CHMOD "${_usr}/share" DIRECTORY_PERMISSIONS
       OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  file(CHMOD_RECURSE "${_usr}/share/doc"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       DIRECTORY_PERMISSIONS
       OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()

endif()
