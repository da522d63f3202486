# Fails unless scripts/gpu-check runs exactly the GoogleTest executables of ctest's
# gpu-labelled tests, from BUILD/tests: gpu-check reads them from tests/**/CMakeLists.txt
# (a packed build has no ctest).
# usage: cmake -DCTEST=<ctest> -DBUILD=<build dir> -DGPU_CHECK=<scripts/gpu-check> -P gpu_check_tests.cmake
execute_process(COMMAND ${CTEST} --show-only=json-v1 -L gpu WORKING_DIRECTORY ${BUILD}
  OUTPUT_VARIABLE listing RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ctest --show-only=json-v1 -L gpu failed (${rc})")
endif()
string(JSON count LENGTH "${listing}" tests)
set(from_ctest "")
if(count GREATER 0)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    # A GoogleTest case is named EXECUTABLE.SUITE.TEST (gtest_add_tests' TEST_PREFIX); the
    # tools' own gpu tests (check_output.sh) have no dot.
    string(JSON name GET "${listing}" tests ${i} name)
    if(name MATCHES "^([A-Za-z0-9_]+)\\.")
      list(APPEND from_ctest "${CMAKE_MATCH_1}")
    endif()
  endforeach()
endif()
list(REMOVE_DUPLICATES from_ctest)
list(SORT from_ctest)

execute_process(COMMAND ${GPU_CHECK} --list --only tests ${BUILD} OUTPUT_VARIABLE text RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gpu-check --list failed (${rc}):\n${text}")
endif()
string(REGEX MATCHALL "\n  (\\$|missing:) [^ \n]+" lines "${text}")
set(from_gpu_check "")
foreach(line ${lines})
  string(REGEX REPLACE "^\n  (\\$|missing:) " "" program "${line}")
  string(FIND "${program}" "${BUILD}/tests/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "gpu-check looks for a GPU test outside ${BUILD}/tests: ${program}")
  endif()
  get_filename_component(program "${program}" NAME)
  list(APPEND from_gpu_check "${program}")
endforeach()
list(REMOVE_DUPLICATES from_gpu_check)
list(SORT from_gpu_check)

if(NOT from_ctest STREQUAL from_gpu_check)
  message(FATAL_ERROR "gpu-check's GPU tests differ from ctest's gpu label:\n  ctest:     ${from_ctest}\n"
                      "  gpu-check: ${from_gpu_check}")
endif()
list(LENGTH from_ctest n)
if(n EQUAL 0)
  message(FATAL_ERROR "no gpu-labelled GoogleTest case in ctest's list: is ${BUILD} a build with CUDA?")
endif()
message(STATUS "gpu-check runs the ${n} executables of ctest's gpu label: ${from_ctest}")
