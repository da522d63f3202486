# cmake -DCOMMAND="a;b;c" -DEXPECT="line1;line2" -P expect_lines.cmake
# Runs COMMAND and fails unless it exits 0 and every EXPECT text occurs in its output
# (in any order: mpirun forwards each rank's output independently).
execute_process(COMMAND ${COMMAND} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "command exited with ${rc}")
endif()
foreach(line IN LISTS EXPECT)
  string(FIND "${out}" "${line}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "expected output not found: '${line}'")
  endif()
endforeach()
