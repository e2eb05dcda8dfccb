# Fails when the conformance program runs a deployment that has no ctest entry of its own
# (tests/conformance/CMakeLists.txt lists them): a backend added to AllBackends() but not to
# that list would otherwise never run.
#   cmake -DPROGRAM=dlock_conformance_tests -DLISTED="redis;redis_unix;..." -P check_deployments.cmake
execute_process(COMMAND ${PROGRAM} --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --gtest_list_tests failed (${rc})")
endif()
# Test lines read "  Name/DEPLOYMENT[_STYLE]  # GetParam() = ...".
string(REGEX MATCHALL "/[a-z0-9_]+  #" suffixes "${listing}")
set(found "")
foreach(suffix ${suffixes})
  string(REGEX REPLACE "^/([a-z0-9_]+)  #$" "\\1" deployment "${suffix}")
  string(REGEX REPLACE "_(blocking|async|queued|hooks)$" "" deployment "${deployment}")
  list(APPEND found ${deployment})
endforeach()
list(REMOVE_DUPLICATES found)
list(SORT found)
set(listed ${LISTED})
list(SORT listed)
if(NOT found STREQUAL listed)
  message(FATAL_ERROR "the conformance program runs the deployments [${found}], but "
                      "tests/conformance/CMakeLists.txt has ctest entries for [${listed}]")
endif()
message(STATUS "every deployment has its ctest entry: ${found}")
