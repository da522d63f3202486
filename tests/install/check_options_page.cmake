# Fails when docs/guides/options.md differs from what the option registry generates.
# Regenerate with: build/release/samples/tools/cohort-options --markdown > docs/guides/options.md
execute_process(COMMAND ${TOOL} --markdown OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cohort-options --markdown failed (${rc})")
endif()
file(READ ${PAGE} committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "${PAGE} is out of date with the option registry; regenerate it with\n"
                      "  cohort-options --markdown > docs/guides/options.md")
endif()
